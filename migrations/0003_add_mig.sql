-- MIG: each GPU's current layout, requests for a MIG profile, and where MIG
-- instances were placed (with the layout a decision configured, if any).
ALTER TABLE gpus ADD COLUMN mig_layout text NOT NULL DEFAULT '';  -- "3g.40gb@0,3g.40gb@4"

ALTER TABLE requests ADD COLUMN mig_profile text NOT NULL DEFAULT '';
ALTER TABLE requests DROP CONSTRAINT requests_check;
ALTER TABLE requests ADD CONSTRAINT requests_shape_check CHECK (
  (whole_gpus > 0)::int + (fraction_milli > 0)::int + (mig_profile <> '')::int = 1);

ALTER TABLE placements ADD COLUMN mig_profile text NOT NULL DEFAULT '';
ALTER TABLE placements ADD COLUMN mig_start integer NOT NULL DEFAULT -1;
ALTER TABLE placements ADD COLUMN mig_new_layout text NOT NULL DEFAULT '';
ALTER TABLE placements ADD COLUMN mig_layout_cleared boolean NOT NULL DEFAULT false;
