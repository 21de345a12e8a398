#!/usr/bin/env bash
# The ledger is append-only and tamper-evident. Against a live arbiterd:
#   - after real decisions, `arbctl ledger verify` is OK with the count and
#     head hash, checkpoints signed by the ledger key;
#   - UPDATE, DELETE and TRUNCATE of the ledger are refused;
#   - with the triggers disabled by a superuser, a modified row, a deleted
#     row and two swapped rows are each reported with the first bad seq.
#
# Usage: ledger_tamper_test.sh BUILD_DIR SOURCE_DIR   (DSN from ARBITER_TEST_PG_DSN_FILE)
set -euo pipefail
build=$1
cluster_dsn=$(cat "$ARBITER_TEST_PG_DSN_FILE")
base="ledger_$$_$RANDOM"
work=$(mktemp -d)
pid=""
psql_in() { psql -XqtA -v ON_ERROR_STOP=1 "$cluster_dsn dbname=$1" -c "$2"; }
stop() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=""
}
cleanup() {
  stop
  for db in "$base" "${base}_modify" "${base}_delete" "${base}_swap"; do
    psql_in postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
start() {  # start DB
  rm -f "$work/port"
  "$build/server/arbiterd" --log-level warn serve --dsn "$cluster_dsn dbname=$1" \
    --insecure-loopback --listen 127.0.0.1:0 --port-file "$work/port" \
    --ledger-key "$work/ledger.key" --checkpoint-every 10 &
  pid=$!
  for _ in $(seq 1 300); do [ -s "$work/port" ] && break; sleep 0.1; done
  export ARBITER_ENDPOINT="127.0.0.1:$(cat "$work/port")"
}
arbctl="$build/clients/arbctl"
export ARBITER_CONFIG=/dev/null
openssl genpkey -algorithm ED25519 -out "$work/ledger.key"
openssl pkey -in "$work/ledger.key" -pubout -out "$work/ledger.pub"

psql_in postgres "CREATE DATABASE $base TEMPLATE arbiter_template"
start "$base"
"$arbctl" demo load > /dev/null
for i in 1 2 3; do
  "$arbctl" request --team inference --pool serving --class inference --gpus 1 --key "t$i" > /dev/null
done
"$arbctl" release 1 > /dev/null
out=$("$arbctl" ledger verify --public-key "$work/ledger.pub")
echo "$out"
grep -q "^OK: " <<<"$out"
grep -q "signed by the ledger key" <<<"$out"
count=$(psql_in "$base" "SELECT count(*) FROM ledger")
grep -q "^OK: $count entries" <<<"$out"
[ "$(psql_in "$base" "SELECT count(*) FROM ledger_checkpoints")" -ge 2 ]
"$arbctl" ledger list --limit 5 | grep -q "cluster.create"
# From the latest checkpoint instead of genesis.
cp=$(psql_in "$base" "SELECT max(seq) FROM ledger_checkpoints")
out=$("$arbctl" ledger verify --public-key "$work/ledger.pub" --from-checkpoint "$cp")
echo "$out"
grep -q "^OK: $((count - cp)) entries after checkpoint $cp" <<<"$out"

# Append-only, even for the owner.
for sql in "UPDATE ledger SET actor = 'x' WHERE seq = 3" "DELETE FROM ledger WHERE seq = 3" \
           "TRUNCATE ledger CASCADE"; do
  if psql_in "$base" "$sql" 2> "$work/err"; then echo "allowed: $sql" >&2; exit 1; fi
  grep -q "append-only" "$work/err"
done
stop

# Two entries in the middle with no checkpoint on them.
a=$(psql_in "$base" "SELECT min(seq) FROM ledger WHERE seq > 5 AND seq NOT IN (SELECT seq FROM
  ledger_checkpoints) AND seq + 1 NOT IN (SELECT seq FROM ledger_checkpoints)")
tamper() {  # tamper NAME SQL EXPECTED_SEQ
  local db="${base}_$1"
  psql_in postgres "CREATE DATABASE $db TEMPLATE $base"
  psql_in "$db" "ALTER TABLE ledger DISABLE TRIGGER USER; $2; ALTER TABLE ledger ENABLE TRIGGER USER"
  start "$db"
  set +e
  out=$("$arbctl" ledger verify --public-key "$work/ledger.pub")
  rc=$?
  set -e
  stop
  echo "$1: $out"
  [ "$rc" -eq 3 ] || { echo "$1: verify exited $rc, want 3" >&2; exit 1; }
  grep -q "^BAD at seq $3:" <<<"$out" || { echo "$1: want first bad seq $3" >&2; exit 1; }
}
tamper modify "UPDATE ledger SET payload = payload || ';forged=1' WHERE seq = $a" "$a"
tamper delete "DELETE FROM ledger WHERE seq = $a" "$a"
tamper swap "UPDATE ledger SET seq = 999999999 WHERE seq = $a;
  UPDATE ledger SET seq = $a WHERE seq = $((a + 1));
  UPDATE ledger SET seq = $((a + 1)) WHERE seq = 999999999" "$a"
echo "ledger tamper test: $count entries verified; modify, delete and swap at seq $a detected"
