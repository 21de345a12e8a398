#!/usr/bin/env bash
# arbctl reaches CreateCluster, CreatePool, GrantRole, RevokeRole and
# ListRoleBindings against a live arbiterd, in tables and JSON, and refuses
# words the API does not know before calling it (exit 2).
#
# Usage: arbctl_access_test.sh BUILD_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
set -euo pipefail
build=$1
source "$(dirname "$0")/live_arbiterd.sh"

new_database access
start_arbiterd --log-level warn serve --dsn "$cluster_dsn dbname=$db" \
  --insecure-loopback --listen 127.0.0.1:0 --port-file "$work/port"
export ARBITER_ENDPOINT="127.0.0.1:$(cat "$work/port")"
arbctl="$build/clients/arbctl"

[ "$("$arbctl" clusters create east --description 'east DC')" = "created cluster east" ] ||
  fail "clusters create"
[ "$("$arbctl" pools create serving --class serving --lends-to batch_analytics)" = \
  "created pool serving" ] || fail "pools create"
"$arbctl" pools list | grep -q "^serving" || fail "pools list does not show the new pool"
"$arbctl" --json pools list | grep -q '"WORKLOAD_CLASS_BATCH_ANALYTICS"' ||
  fail "the pool does not lend to batch_analytics"
set +e
"$arbctl" pools create spare --class warm 2>"$work/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "serving, batch, spot or dev" "$work/err" || fail "bad --class: rc $rc"
"$arbctl" teams create inference > /dev/null

bob=spiffe://arbiter.local/bob
[ "$("$arbctl" roles grant "$bob" --role team_member --scope team:inference)" = \
  "granted team_member on team:inference to $bob" ] || fail "roles grant"
"$arbctl" roles grant group:ml --role auditor > /dev/null
"$arbctl" roles list | grep -E "^$bob +team_member +team:inference" > /dev/null ||
  fail "roles list: $("$arbctl" roles list)"
"$arbctl" --json roles list | grep -q '"subject": "group:ml"' || fail "roles list json"
"$arbctl" roles revoke "$bob" --role team_member --scope team:inference > /dev/null
if "$arbctl" roles list | grep -q "$bob"; then fail "the revoked binding is still listed"; fi
for bad in "--role root" "--role auditor --scope team" "--role auditor --scope cluster:x"; do
  set +e
  # shellcheck disable=SC2086
  "$arbctl" roles grant "$bob" $bad 2>/dev/null; rc=$?
  set -e
  [ "$rc" = 2 ] || fail "roles grant $bad: rc $rc, want 2"
done
# The server's own refusal: a team that does not exist.
set +e
"$arbctl" roles grant "$bob" --role team_admin --scope team:nobody 2>"$work/err"; rc=$?
set -e
[ "$rc" = 1 ] || fail "grant on an unknown team: rc $rc, want 1 ($(cat "$work/err"))"
echo "arbctl_access_test: OK"
