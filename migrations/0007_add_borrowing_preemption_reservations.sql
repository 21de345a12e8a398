-- Quotas per GPU model with borrowing and lending limits; pools that lend
-- serving capacity by rule; requests with priority, preemption terms, an
-- optional start time (advance reservation) and declared duration; and the
-- decision fields that preemption and reservations need.

ALTER TABLE pools
  ADD COLUMN lends_to text[] NOT NULL DEFAULT '{}',
  ADD COLUMN reclaim_grace_seconds bigint NOT NULL DEFAULT 30
    CHECK (reclaim_grace_seconds >= 0);

-- gpu_model '' is the pool-wide quota. -1: unlimited borrowing, or lending
-- all of nominal.
ALTER TABLE quotas
  ADD COLUMN gpu_model text NOT NULL DEFAULT '',
  ADD COLUMN borrowing_limit_milli bigint NOT NULL DEFAULT 0 CHECK (borrowing_limit_milli >= -1),
  ADD COLUMN lending_limit_milli bigint NOT NULL DEFAULT -1
    CHECK (lending_limit_milli >= -1 AND lending_limit_milli <= nominal_milli);
ALTER TABLE quotas DROP CONSTRAINT quotas_pkey;
ALTER TABLE quotas ADD PRIMARY KEY (team, pool, gpu_model);

ALTER TABLE requests
  ADD COLUMN priority integer NOT NULL DEFAULT 0 CHECK (priority BETWEEN -1000 AND 1000),
  ADD COLUMN preemptible boolean NOT NULL DEFAULT false,
  ADD COLUMN checkpoint_seconds bigint NOT NULL DEFAULT 0 CHECK (checkpoint_seconds >= 0),
  ADD COLUMN checkpoint_interval_seconds bigint NOT NULL DEFAULT 0
    CHECK (checkpoint_interval_seconds >= 0),
  ADD COLUMN guaranteed boolean NOT NULL DEFAULT false,
  ADD COLUMN start_at timestamptz,
  ADD COLUMN duration_seconds bigint NOT NULL DEFAULT 0 CHECK (duration_seconds >= 0),
  -- Decision: when placements were charged, the quota charged, and for
  -- preemption the deadline and the preemptor (0: none).
  ADD COLUMN admitted_at timestamptz,
  ADD COLUMN quota_model text NOT NULL DEFAULT '',
  ADD COLUMN preempt_deadline timestamptz,
  ADD COLUMN preempted_by bigint NOT NULL DEFAULT 0,
  -- GPUs held whole, as "node:gpu,node:gpu": a reservation's, or the claim
  -- of a request waiting for its victims to vacate.
  ADD COLUMN holds text NOT NULL DEFAULT '',
  ADD CONSTRAINT requests_guaranteed_not_preemptible CHECK (NOT (guaranteed AND preemptible));
ALTER TABLE requests DROP CONSTRAINT requests_state_check;
ALTER TABLE requests ADD CONSTRAINT requests_state_check CHECK (state IN
  ('admitted', 'queued', 'denied', 'released', 'cancelled', 'preempting', 'preempted',
   'reserved'));
-- Rows admitted before this migration: the last update is the best known
-- admission time.
UPDATE requests SET admitted_at = updated_at WHERE state = 'admitted';

DROP INDEX requests_live;
CREATE INDEX requests_live ON requests (id)
  WHERE state IN ('admitted', 'queued', 'preempting', 'reserved');
