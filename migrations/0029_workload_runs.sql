-- Accounting from the enforcer (docs/chargeback.md, docs/slurm.md): the
-- workload's run as its enforcer reported it at the release (a Slurm job's
-- start and end). An allocation with a run is charged for the run instead of
-- from its admission to its release; NULL when none was reported.
ALTER TABLE requests
  ADD COLUMN run_started_at timestamptz,
  ADD COLUMN run_ended_at timestamptz,
  ADD CONSTRAINT requests_run_both_or_neither
    CHECK ((run_started_at IS NULL) = (run_ended_at IS NULL)),
  ADD CONSTRAINT requests_run_ordered CHECK (run_ended_at >= run_started_at);
