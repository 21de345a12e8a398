-- The GPU catalog as data (docs/catalog.md): models are set through the API
-- (SetGpuModel), from the shipped catalog/gpu-models.json or by an
-- administrator. `mig_profiles` is the profile table in core's text form
-- ("name/id/memory slices/compute slices/SMs/MiB/max/me/starts;..."); ''
-- for a model without MIG, and for the MIG models seeded before this
-- migration, which keep the table built into arbiterd.
ALTER TABLE gpu_models
  ADD COLUMN vendor text NOT NULL DEFAULT 'nvidia',
  ADD COLUMN nvlink_domain_size integer NOT NULL DEFAULT 0 CHECK (nvlink_domain_size >= 0),
  ADD COLUMN mig_profiles text NOT NULL DEFAULT '';
