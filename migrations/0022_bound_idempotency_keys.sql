-- Idempotency keys are remembered for a window after their request ended
-- (arbiterd serve --idempotency-window, 24 h by default), not for ever: a
-- key may be used again once its request has ended and the window has
-- passed, and then starts a new request. So the key is no longer unique;
-- the arbiter, the one writer, refuses a key within its window.
--
-- Start-up reads the live requests (requests_live) and, of the ended ones,
-- only those of the window and the spend of the current month, through
-- requests_ended: it costs what is live, not what ever happened. The list of
-- live states is that of requests_live.
ALTER TABLE requests DROP CONSTRAINT requests_idempotency_key_key;
CREATE INDEX requests_ended ON requests (updated_at)
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');
