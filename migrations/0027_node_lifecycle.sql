-- Node lifecycle (docs/nodes.md): cordon, drain, failure, heartbeats and
-- removal. `last_heartbeat` is written only when a node's agent first
-- heartbeats or comes back: heartbeats themselves are held in memory, and a
-- leader that loads the state counts each heartbeating node's silence from
-- the load. A removed node keeps its row (placements, telemetry and the
-- ledger refer to its id); its name may be registered again, and its GPUs'
-- UUIDs are cleared so that they may too.
ALTER TABLE nodes
  ADD COLUMN cordoned boolean NOT NULL DEFAULT false,
  ADD COLUMN health text NOT NULL DEFAULT 'healthy'
    CHECK (health IN ('healthy', 'unreachable', 'failed')),
  ADD COLUMN drain_deadline timestamptz,
  ADD COLUMN failed_at timestamptz,
  ADD COLUMN last_heartbeat timestamptz,
  ADD COLUMN removed_at timestamptz;
ALTER TABLE nodes DROP CONSTRAINT nodes_cluster_name_key;
CREATE UNIQUE INDEX nodes_cluster_name ON nodes (cluster, name) WHERE removed_at IS NULL;
