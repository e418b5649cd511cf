#!/usr/bin/env bash
# Measures the leasehold command's size and what each store adds to it, for
# the table in README.md ("The binary's size"):
#
#   hack/binsize/measure.sh            # plain build and -tags grpcnotrace
#
# A store's share is the difference when its line is removed from
# store/registry/registry.go, in a copy of this checkout (the working tree,
# uncommitted changes included). Sizes are of unstripped binaries, in bytes
# and MB (10^6 bytes), for this machine's GOOS/GOARCH and Go, built with -trimpath
# (as the container build and TestBinarySize are) so that they do not depend on
# where the checkout is.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mb() { awk -v b="$1" 'BEGIN{printf "%.1f MB", b/1e6}'; }
size() { # size DIR TAGS
  (cd "$1" && go build -trimpath -tags "$2" -o "$work/bin" ./cmd/leasehold) && stat -c %s "$work/bin"
}
mkdir -p "$work/tree"
(cd "$root" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$work/tree")
stores=$(sed -n 's/^\t&\([a-z]*\)\.Descriptor,$/\1/p' "$work/tree/store/registry/registry.go")
echo "$(go version), $(go env GOOS)/$(go env GOARCH)"
echo
echo "| build | plain | -tags grpcnotrace |"
echo "|---|---|---|"
full=$(size "$work/tree" "")
fullnt=$(size "$work/tree" grpcnotrace)
echo "| go build -trimpath ./cmd/leasehold | $full ($(mb "$full")) | $fullnt ($(mb "$fullnt")) |"
for s in $stores; do
  cp "$work/tree/store/registry/registry.go" "$work/registry.go"
  sed -i "/leasehold\/store\/$s\"$/d; /^\t&$s\.Descriptor,$/d" "$work/tree/store/registry/registry.go"
  a=$(size "$work/tree" "")
  b=$(size "$work/tree" grpcnotrace)
  cp "$work/registry.go" "$work/tree/store/registry/registry.go"
  echo "| without $s: its share | $((full - a)) ($(mb $((full - a)))) | $((fullnt - b)) ($(mb $((fullnt - b)))) |"
done
