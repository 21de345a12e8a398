#!/usr/bin/env bash
# deploy/'s production artefacts work as shipped:
#   - every option in deploy/arbiterd.toml is one arbiterd knows (a misspelt
#     key is an error), and arbiterd serves TLS with that file, the paths and
#     the DSN overridden by flags as an operator's unit would;
#   - a key arbiterd does not know makes it refuse to start;
#   - the systemd units of deploy/systemd pass `systemd-analyze verify`.
#
# Usage: deploy_artefacts_test.sh BUILD_DIR SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
set -euo pipefail
build=$1 src=$2
source "$(dirname "$0")/live_arbiterd.sh"

# 1. The sample configuration, whole, with only paths and the DSN overridden.
"$src/deploy/local/make-certs" "$work/tls" platform-admin >/dev/null
openssl genpkey -algorithm ED25519 -out "$work/ledger.key"
new_database deploy
start_arbiterd --config "$src/deploy/arbiterd.toml" serve \
  --dsn "$cluster_dsn dbname=$db" --listen 127.0.0.1:0 --port-file "$work/port" \
  --tls-cert "$work/tls/server.pem" --tls-key "$work/tls/server.key" \
  --tls-client-ca "$work/tls/ca.pem" --ledger-key "$work/ledger.key" \
  --metrics-listen 127.0.0.1:0 --webhook-listen 127.0.0.1:0
# /metrics and the webhook (its certificate is the server's) answer.
# A scrape reads the database; on a loaded machine the first may come before
# the pool's first connection is up, so a few tries (the failure says why).
scraped=false
for _ in $(seq 1 20); do
  if curl -sf "http://127.0.0.1:$(cat "$work/port.metrics")/metrics" >"$work/metrics" &&
    grep -q '^arbiter_ledger_entries ' "$work/metrics"; then
    scraped=true
    break
  fi
  sleep 0.5
done
$scraped || {
  grep -E '^arbiter_state_scrape_ok' "$work/metrics" >&2 || true
  grep -E 'metrics' "$work/arbiterd.log" >&2 || true
  fail "/metrics does not serve arbiter_ledger_entries"
}
curl -sf --cacert "$work/tls/ca.pem" "https://localhost:$(cat "$work/port.webhook")/healthz" |
  grep -q ok || fail "the webhook's /healthz does not answer over HTTPS"
# The admin named in the file is an admin: it may build an organisation over TLS.
out=$("$build/clients/arbctl" --endpoint "localhost:$(cat "$work/port")" \
  --tls-ca "$work/tls/ca.pem" --tls-cert "$work/tls/platform-admin.pem" \
  --tls-key "$work/tls/platform-admin.key" demo load 2>&1) ||
  fail "arbctl demo load as the configured admin: $out"
stop_arbiterd

# 2. A key arbiterd does not know is refused, naming it.
sed 's/^max-batch = 256/max-batches = 256/' "$src/deploy/arbiterd.toml" > "$work/bad.toml"
if out=$("$build/server/arbiterd" --config "$work/bad.toml" serve --dsn "host=/nonexistent" 2>&1); then
  fail "arbiterd accepted an unknown key"
fi
grep -q "max-batches" <<<"$out" || fail "the error does not name the unknown key: $out"

# 3. The systemd units, with ExecStart pointing at the built binaries.
mkdir -p "$work/units"
for unit in "$src"/deploy/systemd/*.service "$src"/deploy/systemd/*.timer; do
  sed -e "s|/usr/local/bin/arbiterd|$build/server/arbiterd|" \
      -e "s|/usr/local/bin/arbiter-agent|$build/clients/arbiter-agent|" \
      "$unit" > "$work/units/$(basename "$unit")"
done
out=$(cd "$work/units" && systemd-analyze verify --man=no ./*.service ./*.timer 2>&1) ||
  fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warned: $out"
echo "deploy_artefacts_test: OK (sample config served TLS; unknown key refused; units verified)"
