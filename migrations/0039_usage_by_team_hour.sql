-- usage_team_hourly: usage_hourly summed by hour, team, pool, workload
-- class and GPU model, kept in step with it by the statement that adds a
-- rollup slice (PgStore::AddUsageSlice and RollUpSlice), in the same
-- transaction.
--
-- usage_hourly has a row per member and hour: as many rows an hour as the
-- requests held in it, millions at thousands of decisions a second. The
-- reports and gauges that sum it by team (utilization, used time per hour,
-- the last hour's gauges on every /metrics scrape) grew with them through
-- each hour; this table has a row per team, pool, class and model an hour,
-- whatever the traffic. Per-member reads (right-sizing) still read
-- usage_hourly.
--
-- Partitioned by the month of `hour`, as usage_hourly (migration 0033), so
-- that retention exports and detaches its closed months with the others.
CREATE TABLE usage_team_hourly (
  hour                    timestamptz NOT NULL,
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
  PRIMARY KEY (hour, team, pool, workload_class, gpu_model)
) PARTITION BY RANGE (hour);

-- No legacy partition: every month, old ones included, gets its own.
INSERT INTO history_partitions (parent, legacy_upper, partition_options)
  VALUES ('usage_team_hourly', '-infinity', '');

SELECT arbiter_ensure_history_partition('usage_team_hourly', m.first_day)
  FROM (SELECT DISTINCT (date_trunc('month', hour AT TIME ZONE 'UTC'))::date AS first_day
          FROM usage_hourly) m;

INSERT INTO usage_team_hourly
  SELECT hour, team, pool, workload_class, gpu_model, sum(allocated_milli_seconds)::bigint,
         sum(sampled_milli_seconds)::bigint, sum(used_milli_seconds)::bigint,
         max(peak_busy_milli), max(peak_memory_mib), sum(energy_mwh)::bigint
    FROM usage_hourly GROUP BY hour, team, pool, workload_class, gpu_model;

CREATE OR REPLACE FUNCTION arbiter_ensure_month_partitions(month date) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM arbiter_ensure_ledger_partition(month);
  PERFORM arbiter_ensure_history_partition('requests', month);
  PERFORM arbiter_ensure_history_partition('placements', month);
  PERFORM arbiter_ensure_history_partition('usage_hourly', month);
  PERFORM arbiter_ensure_history_partition('usage_team_hourly', month);
END $$;

ANALYZE usage_team_hourly;
