#!/usr/bin/env bash
# Runs the arbctl commands README.md shows, against a live arbiterd loaded
# with the demo organisation (as deploy/local/up does), and checks what they
# print. Keeps the README's tour working as written.
#
# Usage: readme_tour_test.sh BUILD_DIR SOURCE_DIR [DOC]   (DSN from ARBITER_TEST_PG_DSN_FILE)
# DOC (default README.md) is the document whose commands run, e.g.
# docs/getting-started.md.
set -euo pipefail
build=$1
src=$2
doc=${3:-README.md}
cluster_dsn=$(cat "$ARBITER_TEST_PG_DSN_FILE")
db="tour_$$_$RANDOM"
work=$(mktemp -d)
psql -Xq "$cluster_dsn dbname=postgres" -c "CREATE DATABASE $db TEMPLATE arbiter_template"
# As deploy/local/up does: a private CA, TLS 1.3 with client certificates,
# and arbctl configured to act as the platform admin.
"$src/deploy/local/make-certs" "$work/tls" admin alice carol >/dev/null
openssl genpkey -algorithm ED25519 -out "$work/ledger.key"
openssl pkey -in "$work/ledger.key" -pubout -out "$work/ledger.pub"
"$build/server/arbiterd" --log-level warn serve --dsn "$cluster_dsn dbname=$db" \
  --tls-cert "$work/tls/server.pem" --tls-key "$work/tls/server.key" \
  --tls-client-ca "$work/tls/ca.pem" --admin spiffe://arbiter.local/admin \
  --ledger-key "$work/ledger.key" --checkpoint-every 20 \
  --listen 127.0.0.1:0 --port-file "$work/port" &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  psql -Xq "$cluster_dsn dbname=postgres" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 1 300); do [ -s "$work/port" ] && break; sleep 0.1; done
cat > "$work/arbctl.conf" <<CONF
endpoint=127.0.0.1:$(cat "$work/port")
tls_ca=$work/tls/ca.pem
tls_cert=$work/tls/admin.pem
tls_key=$work/tls/admin.key
certs_dir=$work/tls
ledger_public_key=$work/ledger.pub
CONF
export ARBITER_CONFIG="$work/arbctl.conf"
arbctl="$build/clients/arbctl"
"$arbctl" demo load | grep -q "demo organisation loaded"

# Every `build/clients/arbctl ...` line of the README, except `watch` (it
# streams until interrupted), in order.
mapfile -t commands < <(grep -E '^build/clients/arbctl ' "$src/$doc" | grep -v ' watch')
cd "$work"  # Files the tour writes (the HTML report) go with it.
[ "${#commands[@]}" -ge 5 ] || { echo "$doc shows too few arbctl commands" >&2; exit 1; }
for line in "${commands[@]}"; do
  args=${line#build/clients/arbctl }
  args=${args%%#*}
  echo "+ arbctl $args"
  # shellcheck disable=SC2086  # The README's words are meant to split.
  out=$("$arbctl" $args)
  echo "$out"
  case "$args" in
    "requests get 7"*)  # The lease of one second runs out without a renewal.
      for _ in $(seq 1 50); do
        grep -q "LEASE_EXPIRED" <<<"$out" && break
        sleep 0.2
        out=$("$arbctl" $args)
      done
      echo "$out"
      grep -q "LEASE_EXPIRED" <<<"$out" ;;
    "export kueue"*) grep -q "kind: ClusterQueue" <<<"$out" ;;
    "--output csv"*) grep -q "^TEAM,POOL" <<<"$out" ;;
    "--output yaml requests"*) grep -qE "^ +state: REQUEST_STATE_ADMITTED$" <<<"$out" ;;
    "ledger list"*) grep -q "^SEQ" <<<"$out" ;;
    whoami*) grep -q "^platform admin: yes" <<<"$out" ;;
    "teams list"*) grep -q "inference" <<<"$out" ;;
    "quotas list --team research"*)
      grep -q "COHORT_BORROW_GPU" <<<"$out" &&
        grep -qE "^research +batch +\* +4 +unlimited +4 +[0-9.]+ +- +4 *$" <<<"$out" ;;
    "inventory list"*) grep -q "h100-serve-0" <<<"$out" ;;
    "models list"*) grep -q "H100-80GB .*3g.40gb" <<<"$out" ;;
    "inventory drain"*) grep -q "is cordoned\|is draining" <<<"$out" ;;
    "inventory uncordon"*) grep -q "is ready" <<<"$out" ;;
    "usage"*) grep -q "^TOTAL" <<<"$out" ;;
    "idle policies"*) grep -q "batch_analytics  *5%  *1800  *release" <<<"$out" ;;
    "slo set"*) grep -q "SLO inference/chat-api in serving" <<<"$out" ;;
    "latency report"*) grep -q "^incident [0-9]*: cost 2.00 (penalty)" <<<"$out" ;;
    "incidents list"*) grep -q "chat-api" <<<"$out" ;;
    "chargeback show"*html*) grep -q 'id="chart-usage"' "$work/chargeback.html" ;;
    "chargeback show"*) grep -q "inference" <<<"$out" ;;
    *--start*) grep -q "reserved" <<<"$out" ;;
    "request --team inference --pool serving --class inference --members 2"*)
      grep -q "WAITING_FOR_PREEMPTION" <<<"$out" ;;
    "request --team training --pool serving"*) grep -q "pending_approval" <<<"$out" ;;
    "--as carol approve"*) grep -q "admitted" <<<"$out" ;;
    "requests list --state preempting"*) grep -q "preempting" <<<"$out" ;;
    "requests list"*) grep -q "admitted" <<<"$out" ;;
    "pools list"*) grep -q "^POOL .*ADMITS .*BORROWS" <<<"$out" && grep -q "^serving .*inference .*training" <<<"$out" ;;
    "pools create front"*) grep -q "created pool front" <<<"$out" ;;
    "request --team inference --pool batch"*) grep -q "POOL_DOES_NOT_LEND" <<<"$out" ;;
    *--burst*) grep -q "burst above quota into pool front's headroom" <<<"$out" ;;
    "power set"*) grep -q "power budget of pool front: 1400 W" <<<"$out" ;;
    "power list"*) grep -q "^pool  *front  *1400" <<<"$out" ;;
    "request --team research --pool front"*) grep -q "POWER: power budget of pool front" <<<"$out" ;;
    "request --team analytics --pool spot"*) grep -q "admitted" <<<"$out" && grep -q "spot" <<<"$out" ;;
    request*) grep -q "admitted" <<<"$out" ;;
    "quotas list"*) grep -q "unlimited\|8" <<<"$out" ;;
    "coexistence list"*) grep -q "soft_sharing" <<<"$out" ;;
    "ledger verify"*) grep -q "^OK: .*signed by the ledger key" <<<"$out" ;;
    "prices list"*) grep -q "H100-80GB" <<<"$out" ;;
    "budgets list"*) grep -q "research" <<<"$out" ;;
    claim*|renew*) grep -q "claimed by pod:" <<<"$out" ;;
    release*) grep -q "released" <<<"$out" ;;
  esac
done
# The watch stream delivers a committed decision.
timeout 10 "$arbctl" watch --team research > "$work/watch" &
watcher=$!
sleep 1
"$arbctl" request --team research --pool dev --class experimentation --milli 100 \
  --gpu-memory-mib 1024 > /dev/null
for _ in $(seq 1 50); do grep -q admitted "$work/watch" && break; sleep 0.1; done
kill "$watcher" 2>/dev/null || true
grep -q "admitted" "$work/watch"
# Identities: alice (team member of training) may not ask for inference's
# capacity; without a certificate nothing but health answers.
if "$arbctl" --as alice request --team inference --pool serving --class inference --gpus 1 \
    2> "$work/denied"; then
  echo "alice was allowed to act for team inference" >&2; exit 1
fi
grep -q "PERMISSION_DENIED" "$work/denied"
if "$arbctl" --tls-cert "" --tls-key "" teams list 2> "$work/anonymous"; then
  echo "a call without a client certificate was answered" >&2; exit 1
fi
grep -q "UNAUTHENTICATED" "$work/anonymous"
echo "$doc tour: ${#commands[@]} commands and a watch ran as written"
