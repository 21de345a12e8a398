-- The leader lease (docs/operations.md, "Replicas"). Several arbiterd
-- replicas share this database; the one holding the advisory lock
-- (store/postgres/pg_lease.h) and the current epoch here is the leader, and
-- only it writes decisions.
--
-- Each takeover increments `epoch`. Every decision a leader writes calls
-- arbiter_fence() with the epoch it took over with, in the same statement:
-- the function takes a share lock on this row and fails with SQLSTATE AR001
-- once a newer leader has taken over. A takeover's UPDATE waits for writes in
-- progress under the old epoch, and the new leader loads the state after its
-- UPDATE commits: every write is either seen by the new leader or refused.
CREATE TABLE leader_lease (
  id smallint PRIMARY KEY CHECK (id = 1),
  epoch bigint NOT NULL CHECK (epoch >= 0),
  holder text NOT NULL,
  -- Where the leader's gRPC API is reached; followers name it in answers.
  address text NOT NULL,
  -- The leader renews this; once it passes, a follower may end the holder's
  -- session (freeing the lock) and take over.
  lease_until timestamptz NOT NULL,
  acquired_at timestamptz NOT NULL
);

INSERT INTO leader_lease (id, epoch, holder, address, lease_until, acquired_at)
VALUES (1, 0, '', '', 'epoch', 'epoch');

CREATE FUNCTION arbiter_fence(expected bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  current_epoch bigint;
BEGIN
  SELECT epoch INTO current_epoch FROM leader_lease WHERE id = 1 FOR SHARE;
  IF current_epoch IS DISTINCT FROM expected THEN
    RAISE EXCEPTION 'fenced: this writer holds epoch %, the current epoch is %',
      expected, current_epoch
      USING ERRCODE = 'AR001';
  END IF;
  RETURN current_epoch;
END;
$$;
