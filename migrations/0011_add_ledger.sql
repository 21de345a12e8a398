-- The ledger: one append-only, hash-chained row per durable change, written
-- in the same transaction as the change. hash = SHA-256 over prev_hash and
-- the canonical entry (ledger/chain.h). Rows can be added, never changed or
-- removed: triggers refuse UPDATE, DELETE and TRUNCATE for everyone, and
-- the privileges are revoked from PUBLIC.
CREATE TABLE ledger (
  seq       bigint PRIMARY KEY CHECK (seq > 0),
  at        timestamptz NOT NULL,
  actor     text NOT NULL,
  action    text NOT NULL,
  subject   text NOT NULL,
  payload   text NOT NULL,
  prev_hash text NOT NULL CHECK (length(prev_hash) = 64),
  hash      text NOT NULL CHECK (length(hash) = 64)
);
CREATE INDEX ledger_subject ON ledger (subject, seq);

-- Ed25519 signatures of the head hash, made with a key kept outside the
-- database (arbiterd --ledger-key).
CREATE TABLE ledger_checkpoints (
  seq       bigint PRIMARY KEY REFERENCES ledger (seq),
  hash      text NOT NULL,
  signature text NOT NULL,
  at        timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the ledger is append-only: % refused on %', TG_OP, TG_TABLE_NAME
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER ledger_no_update BEFORE UPDATE OR DELETE ON ledger
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_no_truncate BEFORE TRUNCATE ON ledger
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoints_no_update BEFORE UPDATE OR DELETE ON ledger_checkpoints
  FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();
CREATE TRIGGER ledger_checkpoints_no_truncate BEFORE TRUNCATE ON ledger_checkpoints
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_change();
REVOKE UPDATE, DELETE, TRUNCATE ON ledger, ledger_checkpoints FROM PUBLIC;
