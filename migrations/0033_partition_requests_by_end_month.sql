-- Requests in partitions by when they ended, so that the table every
-- decision writes holds the live requests only, and the history is a
-- partition per UTC month that is only ever inserted into.
--
-- Before this migration one table held every request ever made. Each
-- decision updated a row of it (queued, admitted, released) with its
-- indexed columns changed, so dead rows piled up across a table that grew
-- by every request, and its vacuum passes grew with it (bench/soak's
-- one-minute throughput dips followed them; migration 0024 only made the
-- passes more frequent).
--
-- `ended_at` is when the request ended (its updated_at at the decision that
-- ended it, which no later write changes), or 'infinity' while it is live. The table is partitioned by
-- range of it:
--   requests_live_partition  ['infinity', MAXVALUE): the live requests;
--   requests_yYYYYmMM        the requests that ended in that UTC month;
--   requests_legacy          those that ended before the end of the month
--                            this migration ran in.
-- A decision that ends a request moves its row from requests_live_partition
-- to the month's partition (PostgreSQL's row movement, in the same statement);
-- nothing updates an ended request. The leader creates each month's
-- partition before the month's first commit (arbiter_ensure_requests_partition,
-- beside the ledger's), and a request that ends in a month with no partition
-- fails its commit, as a ledger entry does.
--
-- A unique key of a partitioned table must hold the partition key, so the
-- primary key is (id, ended_at): ids stay unique because the arbiter, the
-- one writer, assigns them, and a row only ever moves from
-- requests_live_partition to one month. usage_hourly's foreign key to requests(id) goes for the
-- same reason (the hot-path ones went in 0020).
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_request_id_fkey;

ALTER TABLE requests RENAME TO requests_before_0033;
ALTER INDEX requests_pkey RENAME TO requests_before_0033_pkey;
ALTER INDEX requests_team_id RENAME TO requests_before_0033_team_id;
ALTER INDEX requests_live RENAME TO requests_before_0033_live;
ALTER INDEX requests_ended RENAME TO requests_before_0033_ended;
ALTER INDEX requests_ended_key RENAME TO requests_before_0033_ended_key;

CREATE TABLE requests (
  LIKE requests_before_0033 INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  ended_at timestamptz NOT NULL,
  PRIMARY KEY (id, ended_at),
  CONSTRAINT requests_ended_at_check CHECK (ended_at =
    CASE WHEN state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
         THEN 'infinity'::timestamptz ELSE updated_at END)
) PARTITION BY RANGE (ended_at);

-- The indexes of before, on every partition. The partial ones keep their
-- meaning (the live, the ended); each is empty where its rows cannot be.
CREATE INDEX requests_team_id ON requests (team, id DESC);
CREATE INDEX requests_live ON requests (id)
  WHERE state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');
CREATE INDEX requests_ended ON requests (updated_at)
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');
CREATE INDEX requests_ended_key ON requests (idempotency_key)
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');

CREATE TABLE requests_live_partition PARTITION OF requests
  FOR VALUES FROM ('infinity') TO (MAXVALUE);
-- The live partition is the one rewritten at every decision: vacuumed at
-- 1% dead rows plus 2,000 (it holds thousands of rows, not millions), with
-- ten times the default cost limit (as 0024 did for the whole table).
ALTER TABLE requests_live_partition SET (
  autovacuum_vacuum_scale_factor = 0.01,
  autovacuum_vacuum_threshold = 2000,
  autovacuum_analyze_scale_factor = 0.05,
  autovacuum_vacuum_cost_limit = 2000
);

-- Creates the partition of the UTC month that starts at `month` (the first
-- day), unless a partition covers it already (requests_legacy covers up to
-- the end of the month of this migration). Safe to call concurrently.
CREATE FUNCTION arbiter_ensure_requests_partition(month date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  first_day date := date_trunc('month', month)::date;
  lower_at timestamptz := first_day::timestamp AT TIME ZONE 'UTC';
  upper_at timestamptz := (first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC';
  part text := 'requests_y' || to_char(first_day, 'YYYY') || 'm' || to_char(first_day, 'MM');
BEGIN
  IF to_regclass(part) IS NOT NULL
     OR lower_at < (SELECT b.upper_at FROM requests_legacy_bound b) THEN
    RETURN;
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I PARTITION OF requests FOR VALUES FROM (%L) TO (%L)',
                   part, lower_at, upper_at);
  EXCEPTION WHEN duplicate_table THEN
    NULL;  -- Another transaction created it first.
  END;
END $$;

-- Where requests_legacy ends (one row), for arbiter_ensure_requests_partition.
CREATE TABLE requests_legacy_bound (upper_at timestamptz NOT NULL);

DO $$
DECLARE
  bound timestamptz :=
    (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
  EXECUTE format('CREATE TABLE requests_legacy PARTITION OF requests'
                 ' FOR VALUES FROM (MINVALUE) TO (%L)', bound);
  INSERT INTO requests_legacy_bound VALUES (bound);
  -- An ended request dated at or after the bound (a clock that was ahead)
  -- goes to its month's partition.
  PERFORM arbiter_ensure_requests_partition(m)
    FROM (SELECT DISTINCT (r.updated_at AT TIME ZONE 'UTC')::date AS m FROM requests_before_0033 r
          WHERE r.state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
            AND r.updated_at >= bound) months;
  INSERT INTO requests
    SELECT r.*,
           CASE WHEN r.state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
                THEN 'infinity'::timestamptz ELSE r.updated_at END
    FROM requests_before_0033 r;
END
$$;

DROP TABLE requests_before_0033;

-- Raises AR002 unless a commit's updates of requests found every row they
-- meant to change (`updated` of `expected`). The arbiter updates only live
-- requests, and looks for them in requests_live_partition only; a request
-- that is not there fails the whole commit rather than being skipped.
CREATE FUNCTION arbiter_expect_updated(expected bigint, updated bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF expected <> updated THEN
    RAISE EXCEPTION 'write decisions: % of % request updates found their live row',
      updated, expected USING ERRCODE = 'AR002';
  END IF;
  RETURN updated;
END $$;
ANALYZE requests;
