# Sourced by the shell integration tests: a database of their own, cloned
# from the fixture's template, arbiterd processes on it, and cleanup on exit.
#   new_database PREFIX   creates it and sets $db
#   start_arbiterd ARGS   starts arbiterd serve on $db with ARGS, waits for
#                         its port (file $work/port), sets $pid
#   stop_arbiterd
#   psql_in DB SQL, fail MESSAGE
# REQUIRES: $build set, ARBITER_TEST_PG_DSN_FILE in the environment.
cluster_dsn=$(cat "$ARBITER_TEST_PG_DSN_FILE")
work=$(mktemp -d)
pid=""
db=""
export ARBITER_CONFIG=/dev/null
psql_in() { psql -XqtA -v ON_ERROR_STOP=1 "$cluster_dsn dbname=$1" -c "$2"; }
fail() { echo "$(basename "$0"): FAILED: $*" >&2; exit 1; }
stop_arbiterd() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  pid=""
}
cleanup_live() {
  stop_arbiterd
  if [ -n "$db" ]; then psql_in postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true; fi
  rm -rf "$work"
}
trap cleanup_live EXIT
new_database() {
  db="$1_$$_$RANDOM"
  psql_in postgres "CREATE DATABASE $db TEMPLATE arbiter_template"
}
start_arbiterd() {
  rm -f "$work/port"
  "$build/server/arbiterd" "$@" 2>"$work/arbiterd.log" &
  pid=$!
  for _ in $(seq 1 300); do [ -s "$work/port" ] && return 0; sleep 0.1; done
  cat "$work/arbiterd.log" >&2
  fail "arbiterd did not start"
}
