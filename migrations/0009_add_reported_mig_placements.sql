-- MIG placements a node reports for a GPU ("3g.40gb:0,4;1g.10gb:0,1,2"),
-- which win over the model's built-in table; '' when the node reports none.
ALTER TABLE gpus ADD COLUMN mig_placements text NOT NULL DEFAULT '';
