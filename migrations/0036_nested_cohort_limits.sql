-- Nested cohorts (docs/quotas-and-preemption.md): the cohort limits of the
-- subtree a team heads, per pool and model, kept on the team's quota row.
-- -1: no limit (lends all of what its teams lend; borrows without a limit
-- of its own).
ALTER TABLE quotas
  ADD COLUMN cohort_lending_limit_milli bigint NOT NULL DEFAULT -1
    CHECK (cohort_lending_limit_milli >= -1),
  ADD COLUMN cohort_borrowing_limit_milli bigint NOT NULL DEFAULT -1
    CHECK (cohort_borrowing_limit_milli >= -1);
