-- Class-to-pool rules, spot work and serving headroom with bursts
-- (docs/pools.md).
--
-- pools.class_rules: the pool's class-to-pool matrix, "class=admission"
-- items (admission: admit, borrow or deny), at most one per class; a class
-- without one takes the default of the pool's latency class.
-- pools.spot_grace_seconds: the notice spot work gets when preempted; NULL
-- takes reclaim_grace_seconds.
-- pools.headroom: "model=milli" items, the capacity a serving pool keeps
-- free for the classes it admits; max_burst_seconds: the longest burst
-- above quota into it (0: none).
-- requests.spot: spot work, always preemptible. requests.burst_seconds:
-- the burst asked for; burst_until: when an admitted burst ends (NULL: not
-- a burst).
-- prices.burst_micros_per_gpu_hour: the price of a burst (0: the price).
--
-- Adding columns with constant defaults rewrites no partition's rows.
ALTER TABLE pools
  ADD COLUMN class_rules text[] NOT NULL DEFAULT '{}',
  ADD COLUMN spot_grace_seconds bigint
    CHECK (spot_grace_seconds IS NULL OR spot_grace_seconds BETWEEN 0 AND 86400),
  ADD COLUMN headroom text[] NOT NULL DEFAULT '{}',
  ADD COLUMN max_burst_seconds bigint NOT NULL DEFAULT 0
    CHECK (max_burst_seconds BETWEEN 0 AND 86400);

ALTER TABLE requests
  ADD COLUMN spot boolean NOT NULL DEFAULT false,
  ADD COLUMN burst_seconds bigint NOT NULL DEFAULT 0 CHECK (burst_seconds BETWEEN 0 AND 86400),
  ADD COLUMN burst_until timestamptz,
  ADD CONSTRAINT requests_spot_preemptible CHECK (NOT spot OR preemptible),
  ADD CONSTRAINT requests_spot_never_bursts CHECK (NOT spot OR burst_seconds = 0);

ALTER TABLE prices
  ADD COLUMN burst_micros_per_gpu_hour bigint NOT NULL DEFAULT 0
    CHECK (burst_micros_per_gpu_hour >= 0);
