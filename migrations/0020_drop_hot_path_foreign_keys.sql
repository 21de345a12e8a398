-- The rows every decision writes (requests and their placements) no longer
-- carry foreign keys to teams, pools, nodes and requests. Each key check was a
-- query and a row lock per inserted row: a tenth of PostgreSQL's time per
-- decision, and 12-15% of durable decisions per second under load
-- (docs/performance.md).
--
-- The references still hold, by construction:
--   * arbiterd is the only writer of these tables, and it decides every
--     request against its in-memory state, which knows only committed teams,
--     pools and nodes;
--   * teams, pools and nodes are never deleted (no RPC deletes them);
--   * loading the state (startup, takeover, reload) refuses a placement on
--     an unknown node and a request of an unknown team or pool.
-- `bench/run-load --check` and the fault tests count orphans after their
-- runs. Rarely written tables keep their foreign keys.
ALTER TABLE requests DROP CONSTRAINT requests_team_fkey;
ALTER TABLE requests DROP CONSTRAINT requests_pool_fkey;
ALTER TABLE placements DROP CONSTRAINT placements_request_id_fkey;
ALTER TABLE placements DROP CONSTRAINT placements_node_id_fkey;
