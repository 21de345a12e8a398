-- Enforcement (docs/enforcement.md): per pool, how long an admitted
-- allocation may stay unclaimed and how long a claim's lease runs without a
-- renewal (0: not enforced); per request, its members' claims as
-- "member:claimed_at_micros:holder", comma-separated ('' when none).
-- Renewals are not stored: a leader that loads the state renews every
-- lease at the load.
ALTER TABLE pools
  ADD COLUMN claim_deadline_seconds bigint NOT NULL DEFAULT 0
    CHECK (claim_deadline_seconds BETWEEN 0 AND 86400),
  ADD COLUMN lease_seconds bigint NOT NULL DEFAULT 0
    CHECK (lease_seconds BETWEEN 0 AND 86400);
ALTER TABLE requests ADD COLUMN claims text NOT NULL DEFAULT '';
