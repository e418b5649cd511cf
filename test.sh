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

echo "== every other package"
# The longest packages first, the chaos package before all: go test starts
# packages in the order given, two at a time (GOMAXPROCS), so the long ones
# overlap and the run does not end on one long package with the other slot
# idle (alphabetically, the chaos package started 97 s in and PostgreSQL's
# 143 s came last). Every other package follows in go list's order.
mapfile -t longest < <(go list ./internal/chaos ./cmd/leasehold ./store/postgres ./store/kubernetes \
  ./store/etcd ./internal/schedtest ./deploy/container ./store/nats ./store/mysql ./store/zookeeper)
mapfile -t rest < <(go list ./... | grep -v -x -F \
  -e github.com/leasehold/leasehold \
  -e github.com/leasehold/leasehold/store \
  -e github.com/leasehold/leasehold/store/memstore \
  -e github.com/leasehold/leasehold/store/faultstore \
  -e github.com/leasehold/leasehold/store/storetest \
  -e github.com/leasehold/leasehold/fence \
  "${longest[@]/#/-e}")
go test -count=1 -timeout 15m "${longest[@]}" "${rest[@]}"

echo "== a cancelled PostgreSQL advisory wait never leaves the lock held (once failed 1 run in 30)"
go test -count=30 -run 'TestAdvisoryLockCancelled$' ./store/postgres/

if [ -f interop/go.mod ]; then
  echo "== interop module"
  (cd interop && go vet ./... && go test -count=1 ./...)
fi
