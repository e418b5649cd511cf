#!/usr/bin/env bash
# ci.sh is what CI calls before the tests: it builds kube-apiserver and etcd
# (or reuses the cache keyed by the pin; see build.sh), checks that both run,
# and prints the directory holding them, and nothing else, on stdout:
#
#   LEASEHOLD_KUBE_BIN=$(hack/kube-apiserver/ci.sh)
#   export LEASEHOLD_KUBE_BIN
#
# With CI set, the Kubernetes store's tests then fail instead of skipping if
# the server cannot be had. A cold build takes 10-16 minutes on 2 cores;
# keep $LEASEHOLD_CACHE (default $HOME/.cache/leasehold) between runs.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
start=$(date +%s)
bin=$("$here/build.sh")
for b in kube-apiserver etcd; do
	if ! "$bin/$b" --version >/dev/null 2>&1; then
		echo "ci.sh: $bin/$b does not run" >&2
		exit 1
	fi
done
echo "ci.sh: kube-apiserver and etcd ready in $bin ($(($(date +%s) - start))s)" >&2
echo "$bin"
