-- The history in monthly partitions: requests by the month they ended,
-- placements by the month their request was admitted, usage_hourly by the
-- month of its hour. The tables every decision rewrites stay the size of
-- what is live, and a month of history is a table of its own, only ever
-- inserted into, that retention can take out whole.
--
-- Before this migration one `requests` table held every request ever made.
-- Each decision updated a row of it (queued, admitted, released) with its
-- indexed columns changed, so dead rows piled up across a table that grew
-- by every request, and its vacuum passes grew with it (bench/soak's
-- one-minute throughput dips followed them; 0024 only made the passes more
-- frequent).
--
-- requests: `ended_at` is when the request ended (its updated_at at the
-- decision that ended it, which no later write changes), or 'infinity'
-- while it is live. The table is partitioned by range of it:
--   requests_live_partition  ['infinity', MAXVALUE): the live requests;
--   requests_yYYYYmMM        the requests that ended in that UTC month;
--   requests_legacy          those that ended before the end of the month
--                            this migration ran in.
-- The decision that ends a request moves its row from
-- requests_live_partition to its month's partition (row movement, in the
-- same statement); nothing updates an ended request.
--
-- placements: `admitted_at` is its request's admission time; a placement
-- is written once, when its request is admitted, and never updated.
-- placements_yYYYYmMM by that month, placements_legacy before.
--
-- usage_hourly: by the month of `hour`; usage_hourly_legacy before.
--
-- The leader creates each month's partitions before its first commit that
-- writes to them (arbiter_ensure_month_partitions, with the ledger's); the
-- usage rollup makes sure of its hour's. A row for a month with no
-- partition fails its statement, as a ledger entry does.
--
-- A unique key of a partitioned table must hold the partition key: the
-- primary keys become (id, ended_at) and (request_id, member, admitted_at).
-- Ids stay unique because the arbiter, the one writer, assigns them, and a
-- request row only ever moves from the live partition to one month.
-- usage_hourly's foreign key to requests(id) goes for the same reason (the
-- hot-path ones went in 0020).
ALTER TABLE usage_hourly DROP CONSTRAINT usage_hourly_request_id_fkey;

-- What retention took out of the database (arbiterd archive-history): one
-- row per partition, with the file its rows went to. Append-only.
CREATE TABLE history_archives (
  partition   text PRIMARY KEY,
  parent      text NOT NULL,
  from_at     timestamptz,  -- NULL: from the beginning (a legacy partition).
  to_at       timestamptz NOT NULL,
  row_count   bigint NOT NULL CHECK (row_count >= 0),
  -- Of a requests partition: the highest request id in it, so that ids go
  -- on after it (they are never given out again).
  max_request_id bigint,
  file        text NOT NULL,
  sha256      text NOT NULL CHECK (length(sha256) = 64),
  archived_at timestamptz NOT NULL DEFAULT now()
);
CREATE FUNCTION history_archives_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'history_archives is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER history_archives_no_change BEFORE UPDATE OR DELETE ON history_archives
  FOR EACH ROW EXECUTE FUNCTION history_archives_refuse_change();

-- For each partitioned history table: where its legacy partition ends (no
-- month before that gets a partition of its own), and the storage options
-- each new month's partition takes.
CREATE TABLE history_partitions (
  parent            text PRIMARY KEY,
  legacy_upper      timestamptz NOT NULL,
  partition_options text NOT NULL DEFAULT ''
);

-- Creates the partition of `table_name` for the UTC month that starts at
-- `month` (the first day), `<table_name>_yYYYYmMM`, unless it exists, the
-- legacy partition covers the month, or retention archived it. Safe to
-- call concurrently.
CREATE FUNCTION arbiter_ensure_history_partition(table_name text, month date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  h history_partitions%ROWTYPE;
  first_day date := date_trunc('month', month)::date;
  lower_at timestamptz := first_day::timestamp AT TIME ZONE 'UTC';
  upper_at timestamptz := (first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC';
  part text := table_name || '_y' || to_char(first_day, 'YYYY') || 'm' || to_char(first_day, 'MM');
BEGIN
  SELECT * INTO h FROM history_partitions WHERE parent = table_name;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'history partitions: % is not partitioned by month', table_name
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- An archived month stays out: a row dated in it fails its statement.
  IF to_regclass(part) IS NOT NULL OR lower_at < h.legacy_upper
     OR EXISTS (SELECT 1 FROM history_archives a WHERE a.partition = part) THEN
    RETURN;
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                   part, table_name, lower_at, upper_at);
    IF h.partition_options <> '' THEN
      EXECUTE format('ALTER TABLE %I SET (%s)', part, h.partition_options);
    END IF;
  EXCEPTION WHEN duplicate_table OR unique_violation THEN
    NULL;  -- Another transaction created it first.
  END;
END $$;

-- Every monthly partition a commit in the month of `month` may write to.
CREATE FUNCTION arbiter_ensure_month_partitions(month date) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM arbiter_ensure_ledger_partition(month);
  PERFORM arbiter_ensure_history_partition('requests', month);
  PERFORM arbiter_ensure_history_partition('placements', month);
  PERFORM arbiter_ensure_history_partition('usage_hourly', month);
END $$;

ALTER TABLE requests RENAME TO requests_before_0033;
ALTER INDEX requests_pkey RENAME TO requests_before_0033_pkey;
ALTER INDEX requests_team_id RENAME TO requests_before_0033_team_id;
ALTER INDEX requests_live RENAME TO requests_before_0033_live;
ALTER INDEX requests_ended RENAME TO requests_before_0033_ended;
ALTER INDEX requests_ended_key RENAME TO requests_before_0033_ended_key;
ALTER TABLE placements RENAME TO placements_before_0033;
ALTER INDEX placements_pkey RENAME TO placements_before_0033_pkey;
ALTER INDEX placements_node RENAME TO placements_before_0033_node;
ALTER TABLE usage_hourly RENAME TO usage_hourly_before_0033;
ALTER INDEX usage_hourly_pkey RENAME TO usage_hourly_before_0033_pkey;
ALTER INDEX usage_hourly_team RENAME TO usage_hourly_before_0033_team;

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

CREATE TABLE placements (
  LIKE placements_before_0033 INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  admitted_at timestamptz NOT NULL,
  PRIMARY KEY (request_id, member, admitted_at)
) PARTITION BY RANGE (admitted_at);
CREATE INDEX placements_node ON placements (node_id);

CREATE TABLE usage_hourly (
  LIKE usage_hourly_before_0033 INCLUDING DEFAULTS INCLUDING CONSTRAINTS,
  PRIMARY KEY (hour, request_id, member)
) PARTITION BY RANGE (hour);
CREATE INDEX usage_hourly_team ON usage_hourly (team, hour);

DO $$
DECLARE
  bound timestamptz :=
    (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
  t text;
BEGIN
  INSERT INTO history_partitions (parent, legacy_upper, partition_options) VALUES
    ('requests', bound, ''),
    ('placements', bound, ''),
    -- A rollup slice rewrites the row of every member live in the hour (0024).
    ('usage_hourly', bound, 'autovacuum_vacuum_scale_factor = 0.02, '
                            'autovacuum_vacuum_threshold = 10000, '
                            'autovacuum_vacuum_cost_limit = 2000');
  FOREACH t IN ARRAY ARRAY['requests', 'placements', 'usage_hourly'] LOOP
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (MINVALUE) TO (%L)',
                   t || '_legacy', t, bound);
  END LOOP;
  ALTER TABLE usage_hourly_legacy SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 10000,
    autovacuum_vacuum_cost_limit = 2000
  );
  -- Rows dated at or after the bound (a clock that was ahead) go to their
  -- months' partitions.
  PERFORM arbiter_ensure_history_partition('requests', (r.updated_at AT TIME ZONE 'UTC')::date)
    FROM requests_before_0033 r
    WHERE r.state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
      AND r.updated_at >= bound;
  PERFORM arbiter_ensure_history_partition('placements', (x.at AT TIME ZONE 'UTC')::date)
    FROM (SELECT COALESCE(r.admitted_at, r.created_at) AS at
          FROM placements_before_0033 p JOIN requests_before_0033 r ON r.id = p.request_id) x
    WHERE x.at >= bound;
  PERFORM arbiter_ensure_history_partition('usage_hourly', (u.hour AT TIME ZONE 'UTC')::date)
    FROM usage_hourly_before_0033 u WHERE u.hour >= bound;

  INSERT INTO requests
    SELECT r.*,
           CASE WHEN r.state IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
                THEN 'infinity'::timestamptz ELSE r.updated_at END
    FROM requests_before_0033 r;
  -- A placement whose request has no admission time (admitted before 0007
  -- recorded it) is dated at its request's creation; one without a request
  -- at all, at the beginning.
  INSERT INTO placements
    SELECT p.*, COALESCE(r.admitted_at, r.created_at, '-infinity'::timestamptz)
    FROM placements_before_0033 p LEFT JOIN requests_before_0033 r ON r.id = p.request_id;
  INSERT INTO usage_hourly SELECT * FROM usage_hourly_before_0033;
END
$$;

DROP TABLE requests_before_0033;
DROP TABLE placements_before_0033;
DROP TABLE usage_hourly_before_0033;

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

-- The monthly partitions of the history tables, with their months:
-- from_at NULL for a legacy partition (from the beginning).
CREATE VIEW history_partition_months AS
  SELECT h.parent, c.relname::text AS partition,
         CASE WHEN m.first_day IS NULL THEN NULL
              ELSE m.first_day::timestamp AT TIME ZONE 'UTC' END AS from_at,
         CASE WHEN m.first_day IS NULL THEN h.legacy_upper
              ELSE (m.first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC' END AS to_at
  FROM history_partitions h
  JOIN pg_inherits i ON i.inhparent = to_regclass(h.parent)
  JOIN pg_class c ON c.oid = i.inhrelid,
  LATERAL (SELECT to_date(substring(c.relname from '_y([0-9]{4}m[0-9]{2})$'), 'YYYY"m"MM')
             AS first_day) m
  WHERE c.relname = h.parent || '_legacy'
     OR c.relname ~ ('^' || h.parent || '_y[0-9]{4}m[0-9]{2}$');

-- Takes the partition `part`, exported to `archive_file` (`n` rows, whose
-- export has the SHA-256 `digest`), out of the database, after checking, in
-- this transaction and with the partition locked against writes, that:
--   - it is a monthly or legacy partition of a history table;
--   - its month is over (the database clock is past its end);
--   - for placements, no live request holds a placement in it;
--   - it holds exactly `n` rows.
-- Then records the archive, and detaches and drops the partition. Raises
-- check_violation naming what failed, and changes nothing, otherwise.
CREATE FUNCTION arbiter_retire_history_partition(part text, n bigint, archive_file text,
                                                 digest text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  m history_partition_months%ROWTYPE;
  held bigint;
  top_id bigint;
BEGIN
  SELECT * INTO m FROM history_partition_months WHERE partition = part;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'history partition %: not a monthly partition of a history table', part
      USING ERRCODE = 'check_violation';
  END IF;
  EXECUTE format('LOCK TABLE %I IN SHARE MODE', part);
  IF m.to_at > now() THEN
    RAISE EXCEPTION 'history partition %: its month is not over (it ends at %)', part, m.to_at
      USING ERRCODE = 'check_violation';
  END IF;
  IF m.parent = 'placements' THEN
    EXECUTE format('SELECT count(*) FROM %I p JOIN requests_live_partition r'
                   ' ON r.id = p.request_id', part) INTO held;
    IF held > 0 THEN
      RAISE EXCEPTION 'history partition %: % live placements are in it', part, held
        USING ERRCODE = 'check_violation';
    END IF;
  END IF;
  EXECUTE format('SELECT count(*) FROM %I', part) INTO held;
  IF held <> n THEN
    RAISE EXCEPTION 'history partition %: holds % rows, not the % exported', part, held, n
      USING ERRCODE = 'check_violation';
  END IF;
  IF m.parent = 'requests' THEN
    EXECUTE format('SELECT max(id) FROM %I', part) INTO top_id;
  END IF;
  INSERT INTO history_archives (partition, parent, from_at, to_at, row_count, max_request_id,
                                file, sha256)
    VALUES (part, m.parent, m.from_at, m.to_at, n, top_id, archive_file, digest);
  EXECUTE format('ALTER TABLE %I DETACH PARTITION %I', m.parent, part);
  EXECUTE format('DROP TABLE %I', part);
END $$;

ANALYZE requests;
ANALYZE placements;
ANALYZE usage_hourly;
