-- Telemetry: GPU UUIDs for matching samples to the inventory; raw samples in
-- daily partitions (created by the ingester, dropped by retention); rollups
-- per allocation member and hour. Quantities are integers: milli (1000 = a
-- whole GPU or 100%), MiB, milliwatts, milliwatt-hours.
ALTER TABLE gpus ADD COLUMN uuid text NOT NULL DEFAULT '';
CREATE UNIQUE INDEX gpus_uuid ON gpus (uuid) WHERE uuid <> '';

-- One reading of a GPU (mig_instance -1) or of a MIG instance. -1: the
-- source did not report the metric.
CREATE TABLE gpu_samples (
  at                  timestamptz NOT NULL,
  node_id             bigint NOT NULL,
  gpu_index           integer NOT NULL,
  mig_instance        integer NOT NULL CHECK (mig_instance >= -1),
  mig_profile         text NOT NULL,
  interval_ms         integer NOT NULL CHECK (interval_ms > 0),
  util_milli          integer NOT NULL CHECK (util_milli BETWEEN -1 AND 1000),
  engine_active_milli integer NOT NULL CHECK (engine_active_milli BETWEEN -1 AND 1000),
  fb_used_mib         bigint NOT NULL CHECK (fb_used_mib >= -1),
  fb_free_mib         bigint NOT NULL CHECK (fb_free_mib >= -1),
  power_mw            bigint NOT NULL CHECK (power_mw >= -1),
  pod                 text NOT NULL,
  pod_namespace       text NOT NULL,
  PRIMARY KEY (node_id, gpu_index, mig_instance, at)
) PARTITION BY RANGE (at);

-- Creates the partition of `day` (UTC) if it is missing.
CREATE FUNCTION arbiter_ensure_sample_partition(day date) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE format(
    'CREATE TABLE IF NOT EXISTS %I PARTITION OF gpu_samples FOR VALUES FROM (%L) TO (%L)',
    'gpu_samples_' || to_char(day, 'YYYYMMDD'),
    (day::timestamp AT TIME ZONE 'UTC'), ((day + 1)::timestamp AT TIME ZONE 'UTC'));
END $$;

-- Drops the partitions of days before `day`; returns how many.
CREATE FUNCTION arbiter_drop_sample_partitions(day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  part record;
  dropped integer := 0;
BEGIN
  FOR part IN
    SELECT c.relname FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_class p ON p.oid = i.inhparent
    WHERE p.relname = 'gpu_samples' AND c.relname ~ '^gpu_samples_[0-9]{8}$'
      AND to_date(substr(c.relname, 13), 'YYYYMMDD') < day
  LOOP
    EXECUTE format('DROP TABLE %I', part.relname);
    dropped := dropped + 1;
  END LOOP;
  RETURN dropped;
END $$;

-- What each member of an allocation held and used in each hour (UTC),
-- recomputed from the samples until the hour is final.
CREATE TABLE usage_hourly (
  hour                    timestamptz NOT NULL,
  request_id              bigint NOT NULL REFERENCES requests (id),
  member                  integer NOT NULL,
  team                    text NOT NULL,
  pool                    text NOT NULL,
  workload_class          text NOT NULL,
  gpu_model               text NOT NULL,
  allocated_milli_seconds bigint NOT NULL CHECK (allocated_milli_seconds >= 0),
  sampled_milli_seconds   bigint NOT NULL CHECK (sampled_milli_seconds >= 0),
  used_milli_seconds      bigint NOT NULL CHECK (used_milli_seconds >= 0),
  peak_busy_milli         integer NOT NULL,
  peak_memory_mib         bigint NOT NULL,
  energy_mwh              bigint NOT NULL CHECK (energy_mwh >= 0),
  computed_at             timestamptz NOT NULL,
  PRIMARY KEY (hour, request_id, member)
);
CREATE INDEX usage_hourly_team ON usage_hourly (team, hour);
