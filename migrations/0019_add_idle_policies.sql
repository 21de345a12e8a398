-- Idle policies per workload class, set by platform admins over the built-in
-- defaults (core/telemetry.cc DefaultIdlePolicies).
CREATE TABLE idle_policies (
  workload_class  text PRIMARY KEY
    CHECK (workload_class IN ('training', 'inference', 'batch_analytics', 'experimentation')),
  threshold_milli integer NOT NULL CHECK (threshold_milli BETWEEN 1 AND 1000),
  window_seconds  bigint NOT NULL CHECK (window_seconds BETWEEN 60 AND 604800),
  action          text NOT NULL CHECK (action IN ('report', 'notify', 'release')),
  notice_seconds  bigint NOT NULL CHECK (notice_seconds BETWEEN 0 AND 86400),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
