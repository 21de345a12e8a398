-- How each pool's queue is admitted (core::QueueingPolicy): backfill, the
-- default for existing pools and new ones, best_effort or strict; and, for
-- backfill, how long a request may wait for capacity before it becomes the
-- head of the queue (0: never).
ALTER TABLE pools
  ADD COLUMN queueing text NOT NULL DEFAULT 'backfill'
    CHECK (queueing IN ('backfill', 'best_effort', 'strict')),
  ADD COLUMN starvation_limit_seconds bigint NOT NULL DEFAULT 3600
    CHECK (starvation_limit_seconds BETWEEN 0 AND 604800);
