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
mapfile -t rest < <(go list ./... | grep -v -x -F \
  -e github.com/leasehold/leasehold \
  -e github.com/leasehold/leasehold/store \
  -e github.com/leasehold/leasehold/store/memstore \
  -e github.com/leasehold/leasehold/store/faultstore \
  -e github.com/leasehold/leasehold/store/storetest \
  -e github.com/leasehold/leasehold/fence)
go test -count=1 -timeout 15m "${rest[@]}"

echo "== a cancelled PostgreSQL advisory wait never leaves the lock held (once failed 1 run in 30)"
go test -count=30 -run 'TestAdvisoryLockCancelled$' ./store/postgres/

if [ -f interop/go.mod ]; then
  echo "== interop module"
  (cd interop && go vet ./... && go test -count=1 ./...)
fi
