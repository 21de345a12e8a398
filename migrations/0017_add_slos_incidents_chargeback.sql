-- SLOs, the latency windows serving platforms report, incidents (breached
-- windows) with their externality charges, and closed chargeback periods.
-- Incidents, charges and closed periods are append-only, like the ledger
-- that records them: triggers refuse UPDATE, DELETE and TRUNCATE.
CREATE TABLE slos (
  team                      text NOT NULL REFERENCES teams (name),
  service                   text NOT NULL CHECK (service <> ''),
  pool                      text NOT NULL REFERENCES pools (name),
  p99_target_us             bigint NOT NULL CHECK (p99_target_us > 0),
  window_seconds            bigint NOT NULL CHECK (window_seconds BETWEEN 60 AND 86400),
  penalty_micros_per_minute bigint NOT NULL CHECK (penalty_micros_per_minute >= 0),
  updated_at                timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (team, service)
);

-- Measurements, not decisions: written by any replica, never changed.
CREATE TABLE latency_windows (
  team                      text NOT NULL,
  service                   text NOT NULL,
  window_start              timestamptz NOT NULL,
  window_end                timestamptz NOT NULL CHECK (window_end > window_start),
  p50_us                    bigint NOT NULL CHECK (p50_us >= 0),
  p99_us                    bigint NOT NULL CHECK (p99_us >= p50_us),
  requests_milli_per_second bigint NOT NULL CHECK (requests_milli_per_second >= 0),
  reported_at               timestamptz NOT NULL,
  PRIMARY KEY (team, service, window_start)
);

CREATE TABLE incidents (
  id                bigint PRIMARY KEY CHECK (id > 0),
  team              text NOT NULL REFERENCES teams (name),
  service           text NOT NULL,
  pool              text NOT NULL REFERENCES pools (name),
  window_start      timestamptz NOT NULL,
  window_end        timestamptz NOT NULL CHECK (window_end > window_start),
  p50_us            bigint NOT NULL,
  p99_us            bigint NOT NULL,
  p99_target_us     bigint NOT NULL CHECK (p99_us > p99_target_us),
  cost_micros       bigint NOT NULL CHECK (cost_micros >= 0),
  cost_basis        text NOT NULL CHECK (cost_basis IN ('penalty', 'reserved_cost')),
  attributed_micros bigint NOT NULL CHECK (attributed_micros BETWEEN 0 AND cost_micros),
  recorded_at       timestamptz NOT NULL,
  UNIQUE (team, service, window_start)
);
CREATE INDEX incidents_recorded ON incidents (recorded_at);

-- A charge (micros > 0) to a causing team, or the credit (micros < 0) to the
-- victim; per incident they sum to zero. The inputs of the method are kept.
CREATE TABLE externality_charges (
  incident_id                   bigint NOT NULL REFERENCES incidents (id),
  team                          text NOT NULL REFERENCES teams (name),
  micros                        bigint NOT NULL CHECK (micros <> 0),
  borrowed_milli_seconds        bigint NOT NULL CHECK (borrowed_milli_seconds >= 0),
  co_tenancy_milli_seconds      bigint NOT NULL CHECK (co_tenancy_milli_seconds >= 0),
  admission_delay_milli_seconds bigint NOT NULL CHECK (admission_delay_milli_seconds >= 0),
  request_ids                   bigint[] NOT NULL,
  method                        text NOT NULL,
  booked_at                     timestamptz NOT NULL,
  PRIMARY KEY (incident_id, team)
);
CREATE INDEX externality_charges_booked ON externality_charges (booked_at);

CREATE TABLE chargeback_periods (
  period_from     timestamptz PRIMARY KEY,
  period_to       timestamptz NOT NULL CHECK (period_to > period_from),
  closed_at       timestamptz NOT NULL,
  statements_json text NOT NULL,
  hash            text NOT NULL CHECK (length(hash) = 64),
  teams           integer NOT NULL,
  net_cost_micros bigint NOT NULL
);

CREATE TRIGGER incidents_no_update BEFORE UPDATE OR DELETE ON incidents
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER externality_charges_no_update BEFORE UPDATE OR DELETE ON externality_charges
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER chargeback_periods_no_update BEFORE UPDATE OR DELETE ON chargeback_periods
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER incidents_no_truncate BEFORE TRUNCATE ON incidents
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER externality_charges_no_truncate BEFORE TRUNCATE ON externality_charges
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER chargeback_periods_no_truncate BEFORE TRUNCATE ON chargeback_periods
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON incidents, externality_charges, chargeback_periods FROM PUBLIC;
