-- Money. The price book: price per GPU-hour of a GPU model in pools of a
-- latency class, versioned by the time it takes effect (history is kept).
-- Budgets: per team per calendar month (UTC), soft and hard limits. Each
-- request carries the cost charged to its team's month. Money is in micros.
CREATE TABLE prices (
  gpu_model           text NOT NULL REFERENCES gpu_models (name),
  latency_class       text NOT NULL CHECK (latency_class IN ('serving', 'batch', 'spot', 'dev')),
  micros_per_gpu_hour bigint NOT NULL CHECK (micros_per_gpu_hour >= 0),
  effective_from      timestamptz NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (gpu_model, latency_class, effective_from)
);

CREATE TABLE budgets (
  team              text PRIMARY KEY REFERENCES teams (name),
  soft_limit_micros bigint NOT NULL CHECK (soft_limit_micros >= 0),
  hard_limit_micros bigint NOT NULL CHECK (hard_limit_micros >= soft_limit_micros),
  over              text NOT NULL CHECK (over IN ('deny', 'approval')),
  updated_at        timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE requests ADD COLUMN cost_micros bigint NOT NULL DEFAULT 0;

ALTER TABLE authority_rules DROP CONSTRAINT authority_rules_action_check;
ALTER TABLE authority_rules ADD CONSTRAINT authority_rules_action_check
  CHECK (action IN ('borrow', 'guaranteed', 'large', 'over_budget'));
