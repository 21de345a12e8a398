-- Coexistence rules set through the API, over the built-in defaults (see
-- core/coexistence.h). One row per unordered pair of workload classes,
-- stored with class_a <= class_b.
CREATE TABLE coexistence_rules (
  class_a       text NOT NULL
    CHECK (class_a IN ('training', 'inference', 'batch_analytics', 'experimentation')),
  class_b       text NOT NULL
    CHECK (class_b IN ('training', 'inference', 'batch_analytics', 'experimentation')),
  gpu_isolation text NOT NULL CHECK (gpu_isolation IN ('forbidden', 'mig_only', 'soft_sharing')),
  same_node     boolean NOT NULL,
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (class_a, class_b),
  CHECK (class_a <= class_b)
);
