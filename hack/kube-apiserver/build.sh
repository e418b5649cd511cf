#!/usr/bin/env bash
# build.sh builds kube-apiserver and etcd for leasehold's Kubernetes store tests
# and caches them under a key of the pin.
#
# The programs come from the module proxy through the wrapper module next to
# this script (go.mod, go.sum): k8s.io/kubernetes with its staging modules
# replaced by their published releases, and go.etcd.io/etcd/server/v3 at the
# version Kubernetes pins. The wrapper has its own go.mod so none of this ever
# enters leasehold's dependencies.
#
# The cache key is a hash of the wrapper's go.mod and go.sum, this script and
# `go version`; a change to any of them builds into a new directory. When the
# binaries for the current key exist the script does nothing.
#
# Usage:
#   hack/kube-apiserver/build.sh               build if needed; print the bin dir
#   hack/kube-apiserver/build.sh --print-dir   print the bin dir for the current key, build nothing
#   hack/kube-apiserver/build.sh --check       exit 0 if the binaries are cached, 1 if not
#
# The bin dir (the only thing printed on stdout) holds kube-apiserver and etcd;
# point LEASEHOLD_KUBE_BIN at it. Progress goes to stderr.
#
# Environment:
#   LEASEHOLD_CACHE   cache root (default $HOME/.cache/leasehold); binaries go to
#                     $LEASEHOLD_CACHE/kube/<key>/
#
# Cost from cold Go caches: 10-16 minutes on 2 cores, ~2.5 GB peak memory,
# ~0.6 GB of modules and ~2.8 GB of build cache; the binaries are ~140 MB.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

k8s_version=v1.37.2
k8s_minor=37

mode=build
case "${1:-}" in
"") ;;
--print-dir) mode=print ;;
--check) mode=check ;;
-h | --help)
	sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "build.sh: unknown argument ${1}" >&2
	exit 2
	;;
esac

key=$(
	{
		cat "$here/go.mod" "$here/go.sum" "$here/build.sh"
		go version
	} | sha256sum | cut -c1-16
)
cache_root=${LEASEHOLD_CACHE:-$HOME/.cache/leasehold}
bin=$cache_root/kube/$key

cached() { [ -x "$bin/kube-apiserver" ] && [ -x "$bin/etcd" ]; }

case $mode in
print)
	echo "$bin"
	exit 0
	;;
check)
	cached
	exit $?
	;;
esac

if cached; then
	echo "build.sh: cached in $bin" >&2
	echo "$bin"
	exit 0
fi

mkdir -p "$cache_root/kube"
# One build per key at a time: a second caller waits, then finds the cache.
exec 9>"$cache_root/kube/$key.lock"
if command -v flock >/dev/null 2>&1; then
	flock 9
	if cached; then
		echo "build.sh: cached in $bin" >&2
		echo "$bin"
		exit 0
	fi
fi

tmp=$(mktemp -d "$cache_root/kube/$key.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

cd "$here"
start=$(date +%s)
echo "build.sh: building kube-apiserver $k8s_version and etcd into $bin (cold: 10-16 minutes)" >&2
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1"
ldflags+=" -X k8s.io/component-base/version.gitMinor=$k8s_minor"
# GOFLAGS is set here so that the caller's cannot change the build; go.sum
# is committed, so every module is checked against it. -buildvcs=false: the
# wrapper lives in leasehold's repository, whose state is not the binaries'.
export GOFLAGS="-mod=mod -buildvcs=false" GOWORK=off
go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
echo "build.sh: kube-apiserver built after $(($(date +%s) - start))s" >&2
go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
echo "build.sh: etcd built after $(($(date +%s) - start))s" >&2

chmod 755 "$tmp"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: done in $(($(date +%s) - start))s" >&2
echo "$bin"
