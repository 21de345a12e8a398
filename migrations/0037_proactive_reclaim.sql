-- Proactive reclaim (docs/pools.md, "Proactive reclaim").
--
-- pools.proactive_reclaim: a SERVING pool learns its own classes' demand
-- per quarter hour of the week and reclaims lent capacity ahead of a
-- forecast rise, by reclaim_grace_seconds + cold_start_seconds.
--
-- serving_demand: each pool's learnt profile, one row per quarter hour of
-- the week (slot 0 = Monday 00:00 UTC) that has been observed: the figure
-- folded over finished weeks, and the peak of the occurrence in `week`
-- (weeks since the Monday before 1970-01-01). At most 672 rows per pool;
-- rewritten by observations, never ledgered (the reclaims it causes are).
ALTER TABLE pools
  ADD COLUMN proactive_reclaim boolean NOT NULL DEFAULT false,
  ADD COLUMN cold_start_seconds bigint NOT NULL DEFAULT 0
    CHECK (cold_start_seconds BETWEEN 0 AND 86400);

CREATE TABLE serving_demand (
  pool         text NOT NULL REFERENCES pools (name),
  slot         integer NOT NULL CHECK (slot BETWEEN 0 AND 671),
  learnt_milli bigint NOT NULL CHECK (learnt_milli >= 0),
  peak_milli   bigint NOT NULL CHECK (peak_milli >= 0),
  week         bigint NOT NULL,
  PRIMARY KEY (pool, slot)
);
