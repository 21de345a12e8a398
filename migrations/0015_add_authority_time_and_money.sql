-- Authority by time and money: rules for requests that run long (LONG, with
-- a threshold in seconds), and approvers limited by run time and projected
-- cost as well as by size. -1: no limit.
ALTER TABLE authority_rules
  ADD COLUMN threshold_seconds bigint NOT NULL DEFAULT 0 CHECK (threshold_seconds >= 0),
  ADD COLUMN limit_seconds bigint NOT NULL DEFAULT -1 CHECK (limit_seconds >= -1),
  ADD COLUMN limit_micros bigint NOT NULL DEFAULT -1 CHECK (limit_micros >= -1);
ALTER TABLE authority_rules DROP CONSTRAINT authority_rules_pkey;
ALTER TABLE authority_rules ADD PRIMARY KEY
  (pool, action, approver, limit_milli, threshold_milli, threshold_seconds, limit_seconds,
   limit_micros);
ALTER TABLE authority_rules DROP CONSTRAINT authority_rules_action_check;
ALTER TABLE authority_rules ADD CONSTRAINT authority_rules_action_check
  CHECK (action IN ('borrow', 'guaranteed', 'large', 'over_budget', 'long'));
