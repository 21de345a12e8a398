-- Watt budgets per pool, rack and site (docs/power.md). Admitted work's
-- draw is not stored: the arbiter counts it from the allocations that hold
-- capacity, at load and at each decision.
CREATE TABLE power_budgets (
  scope      text NOT NULL CHECK (scope IN ('pool', 'rack', 'site')),
  name       text NOT NULL CHECK (length(name) BETWEEN 1 AND 64),
  watts      bigint NOT NULL CHECK (watts >= 0),
  reclaim    boolean NOT NULL DEFAULT false,
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, name)
);
