#!/usr/bin/env bash
# Builds the leasehold container image from this checkout, offline:
#
#   deploy/container/build.sh [TAG]          # default tag: leasehold:latest
#
# 1. go build the static binary (CGO_ENABLED=0: every store's client is pure
#    Go, SQLite included: modernc.org/sqlite);
# 2. gather the build context: the binary, the host's CA bundle, and passwd
#    and group files naming the user 65532 ("leasehold");
# 3. build the Containerfile FROM scratch with buildah (daemonless; chroot
#    isolation, so no user namespaces are needed), or with `docker build`
#    when there is no buildah and a Docker engine answers.
#
# Environment:
#   LEASEHOLD_IMAGE_OCI=DIR   also write the image as an OCI image layout to DIR
#   BUILDAH_ARGS="..."        extra global buildah flags (the tests give
#                             --root/--runroot/--storage-driver to keep their
#                             image store in a temporary directory)
#   CA_BUNDLE=FILE            the CA certificates to copy in
#                             (default /etc/ssl/certs/ca-certificates.crt)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tag=${1:-leasehold:latest}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
[ -s "$ca" ] || { echo "build.sh: no CA bundle at $ca (apt-get install ca-certificates, or set CA_BUNDLE)" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 go build -trimpath -tags grpcnotrace -o "$ctx/leasehold" ./cmd/leasehold)
cp "$ca" "$ctx/ca-certificates.crt"
printf 'root:x:0:0:root:/:/sbin/nologin\nleasehold:x:65532:65532:leasehold:/:/sbin/nologin\n' >"$ctx/passwd"
printf 'root:x:0:\nleasehold:x:65532:\n' >"$ctx/group"
cp "$here/Containerfile" "$ctx/Containerfile"

# shellcheck disable=SC2086 # BUILDAH_ARGS is a list of flags
if command -v buildah >/dev/null; then
  buildah ${BUILDAH_ARGS:-} bud --isolation chroot --timestamp 0 -t "$tag" -f "$ctx/Containerfile" "$ctx"
  if [ -n "${LEASEHOLD_IMAGE_OCI:-}" ]; then
    buildah ${BUILDAH_ARGS:-} push "$tag" "oci:$LEASEHOLD_IMAGE_OCI:$tag"
  fi
elif docker info >/dev/null 2>&1; then
  docker build -t "$tag" -f "$ctx/Containerfile" "$ctx"
  [ -z "${LEASEHOLD_IMAGE_OCI:-}" ] || { echo "build.sh: LEASEHOLD_IMAGE_OCI needs buildah" >&2; exit 1; }
else
  echo "build.sh: neither buildah nor a Docker engine is available (apt-get install buildah)" >&2
  exit 1
fi
echo "built $tag"
