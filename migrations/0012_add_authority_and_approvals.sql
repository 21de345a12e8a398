-- Declared authority: which actions need approval and who may give it up to
-- what size; and the approval state of requests.
CREATE TABLE authority_rules (
  pool            text NOT NULL,  -- '' for every pool (org-wide).
  action          text NOT NULL CHECK (action IN ('borrow', 'guaranteed', 'large')),
  approver        text NOT NULL CHECK (length(approver) BETWEEN 1 AND 256),
  limit_milli     bigint NOT NULL CHECK (limit_milli >= -1),  -- -1: any size.
  threshold_milli bigint NOT NULL CHECK (threshold_milli >= 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (pool, action, approver, limit_milli, threshold_milli),
  CHECK (action <> 'guaranteed' OR pool = '')
);

ALTER TABLE requests
  -- "action:principal" per approval given, comma-separated.
  ADD COLUMN approvals text NOT NULL DEFAULT '',
  -- While pending: who may still approve, comma-separated, and until when.
  ADD COLUMN approvers text NOT NULL DEFAULT '',
  ADD COLUMN approval_deadline timestamptz;
ALTER TABLE requests DROP CONSTRAINT requests_state_check;
ALTER TABLE requests ADD CONSTRAINT requests_state_check CHECK (state IN
  ('admitted', 'queued', 'denied', 'released', 'cancelled', 'preempting', 'preempted',
   'reserved', 'pending_approval'));
DROP INDEX requests_live;
CREATE INDEX requests_live ON requests (id)
  WHERE state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');
