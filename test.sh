#!/usr/bin/env bash
# Runs every test of leasehold: go vet, the core packages under the race
# detector, every other package, and the interop module (peer libraries against
# leasehold on one key). Store tests talk to real servers on 127.0.0.1; a server
# that is missing is a loud skip here and a failure when CI is set.
set -euo pipefail
cd "$(dirname "$0")"

core=(. ./store ./store/memstore ./store/faultstore ./store/storetest ./fence)
go vet ./...
echo "== core packages, race detector on"
go test -race -count=1 "${core[@]}"

echo "== the chaos package, beside the command and the Kubernetes store"
# The chaos package keeps two cores busy for about twelve minutes; one
# package at a time runs beside it (go test runs two at a time, GOMAXPROCS,
# and starts them in the order given): with more beside it, its failover
# checks fail for the machine's load, not the code (CONTRIBUTING.md). The
# command's tests and Kubernetes' take about half as long, one after the
# other. PostgreSQL's ran here too until two CI runs in a row failed its
# semaphore race for the load: the shared server answered a new connection,
# or a single connection's call, after the race's deadlines.
heavy=(./internal/chaos ./cmd/leasehold ./store/kubernetes)
status=0
log=$(mktemp) # what the two steps printed, for the summary of failures at the end
interopLog=$(mktemp)
trap 'rm -f "$log" "$interopLog"' EXIT
go test -count=1 -timeout 15m "${heavy[@]}" 2>&1 | tee -a "$log" || status=$? # the rest runs all the same

echo "== every other package, four at a time, beside the interop module"
# These mostly wait on their servers and on leases: run two at a time after
# the chaos package, they left the machine 48-78 % idle. The interop module
# (peer libraries against leasehold on one key) runs beside them; its output
# follows theirs. The longest start first, the rest in go list's order.
mapfile -t longest < <(go list ./store/postgres ./internal/schedtest ./store/etcd ./store/nats ./store/zookeeper ./store/mysql ./store/redis)
mapfile -t earlier < <(go list "${core[@]}" "${heavy[@]}")
mapfile -t rest < <(go list ./... | grep -v -x -F "${earlier[@]/#/-e}" "${longest[@]/#/-e}")
interop=
if [ -f interop/go.mod ]; then
  # The bench module's tests that need no server (its report: the targets,
  # the run's spread, the rows' order) run after it; TestQuick, which runs
  # the bench against the servers for a minute, does not.
  (cd interop && go vet ./... && go test -count=1 ./... &&
    cd ../bench && go vet . && go test -count=1 -skip '^TestQuick$' .) >"$interopLog" 2>&1 &
  interop=$!
fi
go test -p 4 -count=1 -timeout 15m "${longest[@]}" "${rest[@]}" 2>&1 | tee -a "$log" || status=$?
if [ -n "$interop" ]; then
  echo "== interop module, then the bench module's report tests"
  wait "$interop" || status=$?
  tee -a "$log" <"$interopLog"
fi
if [ "$status" -ne 0 ]; then
  # Said again last: a CI log keeps only its beginning and its end, and a
  # failing chaos test's timeline alone is longer than both.
  echo "== what failed (the failing tests' own lines, without the chaos timelines)"
  grep -E -e '^ *--- FAIL' -e '^(FAIL|panic:)' -e '^ +[A-Za-z0-9_]+\.go:[0-9]+: ' "$log" |
    grep -v -E '\.go:[0-9]+: chaos: g[0-9]+ ' | tail -n 60 || true
  exit "$status"
fi

echo "== a cancelled PostgreSQL advisory wait never leaves the lock held (once failed 1 run in 30)"
go test -count=30 -run 'TestAdvisoryLockCancelled$' ./store/postgres/
