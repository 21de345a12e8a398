-- Start-up reads what is live, not the history (docs/operations.md).
--
-- Idempotency keys are remembered for a window after their request ended
-- (arbiterd serve --idempotency-window, 24 h by default), not for ever: a
-- key may be used again once its request has ended and the window has
-- passed, and then starts a new request. So the key is no longer unique;
-- the arbiter, the one writer, refuses a key within its window. Start-up
-- reads the ended requests of the window through requests_ended. The list
-- of live states is that of requests_live.
ALTER TABLE requests DROP CONSTRAINT requests_idempotency_key_key;
CREATE INDEX requests_ended ON requests (updated_at)
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval');

-- What ended requests cost, per team and month of admission (UTC): each
-- request's final cost is added when it ends, in the statement that writes
-- it. Budgets check the month's spend: start-up reads this month's rows
-- here, and adds what the live requests are projected to cost.
CREATE TABLE ended_spend (
  team   text NOT NULL,
  month  timestamptz NOT NULL,
  micros bigint NOT NULL,
  PRIMARY KEY (team, month)
);
INSERT INTO ended_spend (team, month, micros)
  SELECT team, date_trunc('month', admitted_at, 'UTC'), sum(cost_micros)
  FROM requests
  WHERE state NOT IN ('admitted', 'queued', 'preempting', 'reserved', 'pending_approval')
    AND admitted_at IS NOT NULL AND cost_micros <> 0
  GROUP BY 1, 2;
