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

echo "== the chaos package, beside the command and the two slowest stores"
# The chaos package keeps two cores busy for about twelve minutes; one
# package at a time runs beside it (go test runs two at a time, GOMAXPROCS,
# and starts them in the order given): with more beside it, its failover
# checks fail for the machine's load, not the code (CONTRIBUTING.md). The
# command's tests, PostgreSQL's and Kubernetes' took as long as it did, one
# after another, in a CI run on this project's 2-core machine.
heavy=(./internal/chaos ./cmd/leasehold ./store/postgres ./store/kubernetes)
status=0
go test -count=1 -timeout 15m "${heavy[@]}" || status=$? # the rest runs all the same

echo "== every other package, four at a time, beside the interop module"
# These mostly wait on their servers and on leases: run two at a time after
# the chaos package, they left the machine 48-78 % idle. The interop module
# (peer libraries against leasehold on one key) runs beside them; its output
# follows theirs. The longest start first, the rest in go list's order.
mapfile -t longest < <(go list ./internal/schedtest ./store/etcd ./store/nats ./store/zookeeper ./store/mysql ./store/redis)
mapfile -t earlier < <(go list "${core[@]}" "${heavy[@]}")
mapfile -t rest < <(go list ./... | grep -v -x -F "${earlier[@]/#/-e}" "${longest[@]/#/-e}")
interopLog=$(mktemp)
trap 'rm -f "$interopLog"' EXIT
interop=
if [ -f interop/go.mod ]; then
  (cd interop && go vet ./... && go test -count=1 ./...) >"$interopLog" 2>&1 &
  interop=$!
fi
go test -p 4 -count=1 -timeout 15m "${longest[@]}" "${rest[@]}" || status=$?
if [ -n "$interop" ]; then
  echo "== interop module"
  wait "$interop" || status=$?
  cat "$interopLog"
fi
[ "$status" -eq 0 ] || exit "$status"

echo "== a cancelled PostgreSQL advisory wait never leaves the lock held (once failed 1 run in 30)"
go test -count=30 -run 'TestAdvisoryLockCancelled$' ./store/postgres/
