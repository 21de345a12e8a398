-- The milli-GPU each member is charged, as decided (an instance's SM share
-- for MIG). Stored so that reads and usage sums need no catalog, and so that
-- a later catalog change never re-prices existing decisions. Rows from before
-- this migration: whole GPUs and fractions are filled in here; MIG rows keep
-- 0 and are re-priced from the catalog when the arbiter loads them.
ALTER TABLE requests ADD COLUMN gpu_milli_per_member bigint NOT NULL DEFAULT 0
  CHECK (gpu_milli_per_member >= 0);
UPDATE requests SET gpu_milli_per_member = whole_gpus::bigint * 1000 + fraction_milli
  WHERE mig_profile = '';
