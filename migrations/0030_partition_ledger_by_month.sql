-- The ledger in monthly partitions, so that retention can take a closed
-- month out of the database whole (arbiterd archive-ledger: export to a
-- file the chain still verifies against, then detach and drop), and the
-- table the leader appends to stays the size of the months kept.
--
-- The ledger is partitioned by range of `at` (the commit time, UTC months).
-- A unique key of a partitioned table must hold the partition key, so the
-- primary key becomes (seq, at): seq is still unique within a partition,
-- and across them the single writer (the leader, fenced) and the chain,
-- whose verification names any repeated or missing seq, keep it so.
--
-- What was in the ledger before this migration stays where it is: the old
-- table becomes the partition `ledger_legacy`, from the beginning to the end
-- of the month this migration ran in (its key is rebuilt as (seq, at), and
-- attaching it reads it once). The leader creates each month's partition before
-- its first entry of that month (arbiter_ensure_ledger_partition).
--
-- Rows stay append-only: UPDATE and DELETE are refused on every partition
-- (a row trigger on the parent is cloned to each), and TRUNCATE on the
-- parent and on each partition. Retention detaches and drops whole
-- partitions, as the table owner; ledger_partitions records what it took
-- (the seq range, the last hash and the file), and is append-only but for
-- that one update.
-- A checkpoint may outlive its entry's partition (the archive file holds
-- the entry then), and a foreign key to a partitioned table would need seq
-- alone to be unique.
ALTER TABLE ledger_checkpoints DROP CONSTRAINT ledger_checkpoints_seq_fkey;
ALTER TABLE ledger RENAME TO ledger_legacy;
-- Its key becomes the parent's: (seq, at) (rebuilding the index once).
ALTER TABLE ledger_legacy DROP CONSTRAINT ledger_pkey;
ALTER TABLE ledger_legacy ADD CONSTRAINT ledger_legacy_pkey PRIMARY KEY (seq, at);
ALTER INDEX ledger_subject RENAME TO ledger_legacy_subject;
-- The parent's row trigger of the same name is cloned onto it when it is
-- attached (its TRUNCATE trigger stays: statement triggers are not cloned).
DROP TRIGGER ledger_no_update ON ledger_legacy;

CREATE TABLE ledger (
  seq       bigint NOT NULL CONSTRAINT ledger_seq_check CHECK (seq > 0),
  at        timestamptz NOT NULL,
  actor     text NOT NULL,
  action    text NOT NULL,
  subject   text NOT NULL,
  payload   text NOT NULL,
  -- The checks are named as ledger_legacy's, which must match to attach.
  prev_hash text NOT NULL CONSTRAINT ledger_prev_hash_check CHECK (length(prev_hash) = 64),
  hash      text NOT NULL CONSTRAINT ledger_hash_check CHECK (length(hash) = 64),
  PRIMARY KEY (seq, at)
) PARTITION BY RANGE (at);
CREATE INDEX ledger_subject ON ledger (subject, seq);
CREATE TRIGGER ledger_no_update BEFORE UPDATE OR DELETE ON ledger
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON ledger FROM PUBLIC;

-- One row per partition, in the order of time. from_at NULL: from the
-- beginning (ledger_legacy). The archive columns are set once, when
-- retention takes the partition out.
CREATE TABLE ledger_partitions (
  name        text PRIMARY KEY,
  from_at     timestamptz,
  to_at       timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  archived_at timestamptz,
  first_seq   bigint,
  last_seq    bigint,
  last_hash   text,
  entries     bigint,
  file        text,
  CHECK (from_at IS NULL OR from_at < to_at),
  CHECK ((archived_at IS NULL) = (file IS NULL))
);

CREATE FUNCTION ledger_partitions_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL
     AND (NEW.name, NEW.from_at, NEW.to_at, NEW.created_at)
         IS NOT DISTINCT FROM (OLD.name, OLD.from_at, OLD.to_at, OLD.created_at) THEN
    RETURN NEW;  -- Recording the archive, once.
  END IF;
  RAISE EXCEPTION 'ledger_partitions is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER ledger_partitions_no_change BEFORE UPDATE OR DELETE ON ledger_partitions
  FOR EACH ROW EXECUTE FUNCTION ledger_partitions_refuse_change();

DO $$
DECLARE
  bound timestamptz :=
    (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
  EXECUTE format('ALTER TABLE ledger ATTACH PARTITION ledger_legacy FOR VALUES FROM (MINVALUE) TO (%L)',
                 bound);
  INSERT INTO ledger_partitions (name, from_at, to_at) VALUES ('ledger_legacy', NULL, bound);
END
$$;

-- Creates the partition of the UTC month that starts at `month` (the first
-- day), unless a partition covers it already or covered it (then archived:
-- an entry of an archived month is refused, as no partition takes it).
-- Safe to call concurrently.
CREATE FUNCTION arbiter_ensure_ledger_partition(month date) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  first_day date := date_trunc('month', month)::date;
  lower_at timestamptz := first_day::timestamp AT TIME ZONE 'UTC';
  upper_at timestamptz := (first_day + interval '1 month')::timestamp AT TIME ZONE 'UTC';
  part text := 'ledger_y' || to_char(first_day, 'YYYY') || 'm' || to_char(first_day, 'MM');
BEGIN
  IF EXISTS (SELECT 1 FROM ledger_partitions p
             WHERE (p.from_at IS NULL OR p.from_at <= lower_at) AND lower_at < p.to_at) THEN
    RETURN;
  END IF;
  BEGIN
    EXECUTE format('CREATE TABLE %I PARTITION OF ledger FOR VALUES FROM (%L) TO (%L)',
                   part, lower_at, upper_at);
    EXECUTE format('CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON %I'
                   ' FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change()', part);
    EXECUTE format('REVOKE UPDATE, DELETE, TRUNCATE ON %I FROM PUBLIC', part);
    INSERT INTO ledger_partitions (name, from_at, to_at) VALUES (part, lower_at, upper_at);
  EXCEPTION WHEN duplicate_table OR unique_violation THEN
    NULL;  -- Another transaction created it first.
  END;
END $$;

-- Takes the partition `part`, exported to `archive_file`, out of the ledger,
-- after checking, in this transaction, that:
--   - it is the oldest partition not yet archived, and the ledger has an
--     entry after its month (it is closed);
--   - it holds what was exported: `n` entries, seq `first_seq`..`last_seq`
--     (both NULL when n = 0), the last with hash `last_hash`;
--   - no entry outside it has a seq up to `last_seq`;
--   - its first entry links to the previous archive's last hash (genesis
--     when there is none), and the next entry to `last_hash`.
-- Then records the archive, and detaches and drops the partition (which
-- locks the ledger against appends until this transaction ends). Raises
-- check_violation naming what failed, and changes nothing, otherwise.
CREATE FUNCTION arbiter_retire_ledger_partition(part text, n bigint, first_seq bigint,
                                                last_seq bigint, last_hash text,
                                                archive_file text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  p ledger_partitions%ROWTYPE;
  prev ledger_partitions%ROWTYPE;
  held record;
  next_entry record;
  first_prev_hash text;
  expected_prev text := repeat('0', 64);
BEGIN
  SELECT * INTO p FROM ledger_partitions WHERE name = part FOR UPDATE;
  IF NOT FOUND OR p.archived_at IS NOT NULL THEN
    RAISE EXCEPTION 'ledger partition %: not a partition of the ledger', part
      USING ERRCODE = 'check_violation';
  END IF;
  IF EXISTS (SELECT 1 FROM ledger_partitions o
             WHERE o.archived_at IS NULL AND o.to_at < p.to_at) THEN
    RAISE EXCEPTION 'ledger partition %: an older partition is not archived yet', part
      USING ERRCODE = 'check_violation';
  END IF;
  IF NOT EXISTS (SELECT 1 FROM ledger WHERE at >= p.to_at) THEN
    RAISE EXCEPTION 'ledger partition %: not closed (no entry after %)', part, p.to_at
      USING ERRCODE = 'check_violation';
  END IF;
  SELECT count(*) AS n, min(l.seq) AS first_seq, max(l.seq) AS last_seq INTO held
    FROM ledger l WHERE (p.from_at IS NULL OR l.at >= p.from_at) AND l.at < p.to_at;
  IF held.n <> n OR held.first_seq IS DISTINCT FROM first_seq
     OR held.last_seq IS DISTINCT FROM last_seq THEN
    RAISE EXCEPTION 'ledger partition %: holds % entries, seq %..%, not the % exported (%..%)',
      part, held.n, held.first_seq, held.last_seq, n, first_seq, last_seq
      USING ERRCODE = 'check_violation';
  END IF;
  IF n = 0 THEN
    UPDATE ledger_partitions SET archived_at = now(), entries = 0, file = archive_file
      WHERE name = part;
    EXECUTE format('ALTER TABLE ledger DETACH PARTITION %I', part);
    EXECUTE format('DROP TABLE %I', part);
    RETURN;
  END IF;
  IF (SELECT l.hash FROM ledger l WHERE l.seq = last_seq AND l.at < p.to_at
        AND (p.from_at IS NULL OR l.at >= p.from_at)) IS DISTINCT FROM last_hash THEN
    RAISE EXCEPTION 'ledger partition %: entry % does not have the exported hash', part, last_seq
      USING ERRCODE = 'check_violation';
  END IF;
  IF EXISTS (SELECT 1 FROM ledger l WHERE l.seq <= last_seq
             AND NOT ((p.from_at IS NULL OR l.at >= p.from_at) AND l.at < p.to_at)) THEN
    RAISE EXCEPTION 'ledger partition %: entries up to seq % lie outside it', part, last_seq
      USING ERRCODE = 'check_violation';
  END IF;
  SELECT * INTO prev FROM ledger_partitions o
    WHERE o.archived_at IS NOT NULL AND o.last_seq IS NOT NULL ORDER BY o.to_at DESC LIMIT 1;
  IF FOUND THEN
    expected_prev := prev.last_hash;
  END IF;
  IF first_seq <> COALESCE(prev.last_seq, 0) + 1 THEN
    RAISE EXCEPTION 'ledger partition %: starts at seq %, the archive before ends at %',
      part, first_seq, COALESCE(prev.last_seq, 0)
      USING ERRCODE = 'check_violation';
  END IF;
  SELECT l.prev_hash INTO first_prev_hash FROM ledger l
    WHERE l.seq = first_seq AND l.at < p.to_at AND (p.from_at IS NULL OR l.at >= p.from_at);
  IF first_prev_hash IS DISTINCT FROM expected_prev THEN
    RAISE EXCEPTION 'ledger partition %: entry % does not link to the archive before', part,
      first_seq USING ERRCODE = 'check_violation';
  END IF;
  SELECT l.seq, l.prev_hash INTO next_entry FROM ledger l WHERE l.seq > last_seq
    ORDER BY l.seq LIMIT 1;
  IF next_entry.seq IS DISTINCT FROM last_seq + 1
     OR next_entry.prev_hash IS DISTINCT FROM last_hash THEN
    RAISE EXCEPTION 'ledger partition %: the entry after seq % does not link to it', part,
      last_seq USING ERRCODE = 'check_violation';
  END IF;
  UPDATE ledger_partitions
    SET archived_at = now(), first_seq = arbiter_retire_ledger_partition.first_seq,
        last_seq = arbiter_retire_ledger_partition.last_seq,
        last_hash = arbiter_retire_ledger_partition.last_hash, entries = n, file = archive_file
    WHERE name = part;
  EXECUTE format('ALTER TABLE ledger DETACH PARTITION %I', part);
  EXECUTE format('DROP TABLE %I', part);
END $$;
