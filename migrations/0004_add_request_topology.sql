-- Gang topology: every member on one node, or in one topology domain.
ALTER TABLE requests ADD COLUMN topology text NOT NULL DEFAULT 'any'
  CHECK (topology IN ('any', 'same_node', 'same_domain'));
