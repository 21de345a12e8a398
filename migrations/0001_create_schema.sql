-- The system of record of Arbiter: catalog, inventory, governance and
-- capacity requests with their placements. Forward-only; never edit after merge.

-- Applied migrations, written by the migrator in the same transaction as the
-- migration itself.
CREATE TABLE schema_migrations (
  version     integer PRIMARY KEY,
  name        text NOT NULL,
  checksum    text NOT NULL,  -- hex SHA-256 of the migration file
  applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE gpu_models (
  name        text PRIMARY KEY,
  memory_mib  bigint NOT NULL CHECK (memory_mib > 0),
  sm_count    integer NOT NULL CHECK (sm_count > 0),
  tdp_watts   integer NOT NULL CHECK (tdp_watts > 0),
  mig_capable boolean NOT NULL
);

CREATE TABLE clusters (
  name        text PRIMARY KEY,
  description text NOT NULL DEFAULT '',
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pools (
  name          text PRIMARY KEY,
  latency_class text NOT NULL CHECK (latency_class IN ('serving', 'batch', 'spot', 'dev')),
  description   text NOT NULL DEFAULT '',
  created_at    timestamptz NOT NULL DEFAULT now()
);

-- Node ids are assigned by the arbiter (dense from 1), not by a sequence, so
-- that a decision is complete before its batch is written.
CREATE TABLE nodes (
  id              bigint PRIMARY KEY CHECK (id > 0),
  cluster         text NOT NULL REFERENCES clusters (name),
  name            text NOT NULL,
  pool            text NOT NULL REFERENCES pools (name),
  topology_domain text NOT NULL DEFAULT '',
  cpu_milli       bigint NOT NULL CHECK (cpu_milli > 0),
  memory_mib      bigint NOT NULL CHECK (memory_mib > 0),
  created_at      timestamptz NOT NULL DEFAULT now(),
  UNIQUE (cluster, name)
);
CREATE INDEX nodes_pool ON nodes (pool);

CREATE TABLE gpus (
  node_id   bigint NOT NULL REFERENCES nodes (id),
  gpu_index integer NOT NULL CHECK (gpu_index >= 0),
  model     text NOT NULL REFERENCES gpu_models (name),
  PRIMARY KEY (node_id, gpu_index)
);

CREATE TABLE teams (
  name         text PRIMARY KEY,
  parent       text REFERENCES teams (name),
  weight_milli bigint NOT NULL CHECK (weight_milli > 0),
  created_at   timestamptz NOT NULL DEFAULT now(),
  CHECK (parent IS NULL OR parent <> name)
);

CREATE TABLE quotas (
  team          text NOT NULL REFERENCES teams (name),
  pool          text NOT NULL REFERENCES pools (name),
  nominal_milli bigint NOT NULL CHECK (nominal_milli >= 0),
  updated_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team, pool)
);

-- A capacity request and its decision. Request ids are assigned by the
-- arbiter. Shape: whole_gpus > 0 for whole GPUs, else a fraction.
CREATE TABLE requests (
  id                  bigint PRIMARY KEY CHECK (id > 0),
  idempotency_key     text NOT NULL UNIQUE,
  body_hash           bigint NOT NULL,
  team                text NOT NULL REFERENCES teams (name),
  pool                text NOT NULL REFERENCES pools (name),
  workload_class      text NOT NULL
    CHECK (workload_class IN ('training', 'inference', 'batch_analytics', 'experimentation')),
  members             integer NOT NULL CHECK (members BETWEEN 1 AND 1024),
  whole_gpus          integer NOT NULL CHECK (whole_gpus >= 0),
  fraction_milli      bigint NOT NULL CHECK (fraction_milli BETWEEN 0 AND 1000),
  fraction_memory_mib bigint NOT NULL CHECK (fraction_memory_mib >= 0),
  cpu_milli           bigint NOT NULL CHECK (cpu_milli >= 0),
  memory_mib          bigint NOT NULL CHECK (memory_mib >= 0),
  gpu_models          text[] NOT NULL,
  description         text NOT NULL,
  state               text NOT NULL
    CHECK (state IN ('admitted', 'queued', 'denied', 'released', 'cancelled')),
  reason_code         text NOT NULL DEFAULT '',
  reason              text NOT NULL DEFAULT '',
  created_at          timestamptz NOT NULL,
  updated_at          timestamptz NOT NULL,
  CHECK ((whole_gpus > 0) <> (fraction_milli > 0))
);
CREATE INDEX requests_team_id ON requests (team, id DESC);
CREATE INDEX requests_live ON requests (id) WHERE state IN ('admitted', 'queued');

-- Where each member of an admitted request sits. Kept after release as history.
CREATE TABLE placements (
  request_id     bigint NOT NULL REFERENCES requests (id),
  member         integer NOT NULL CHECK (member >= 0),
  node_id        bigint NOT NULL REFERENCES nodes (id),
  gpu_indices    integer[] NOT NULL,
  gpu_milli      bigint NOT NULL CHECK (gpu_milli BETWEEN 1 AND 1000),
  gpu_memory_mib bigint NOT NULL CHECK (gpu_memory_mib > 0),
  cpu_milli      bigint NOT NULL CHECK (cpu_milli >= 0),
  memory_mib     bigint NOT NULL CHECK (memory_mib >= 0),
  exclusive      boolean NOT NULL,
  PRIMARY KEY (request_id, member)
);
CREATE INDEX placements_node ON placements (node_id);
