-- The idempotency keys of ended requests are looked up in PostgreSQL, not
-- kept in the arbiter's memory for the whole window: before it decides a
-- new request, arbiterd asks which of the keys in hand an ended request of
-- the window used (kFindEndedKeys, batched; app/ended_keys.h). Its memory
-- keeps the live requests' keys and those of the last minutes only.
--
-- Only ended rows are indexed: the live ones' keys are in memory, and a
-- row enters the index once, when its request ends.
CREATE INDEX requests_ended_key ON requests (idempotency_key)
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');
