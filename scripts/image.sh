#!/usr/bin/env bash
# Builds lockstep's OCI image (deploy/Containerfile) as `lockstep` in buildah's local
# storage, and exports what the tests run: the image's filesystem (target/image/rootfs)
# and what buildah says of it (target/image/inspect.json: the OCI config's entrypoint, user,
# environment and working directory under OCIv1.config).
#
#   bash scripts/image.sh                  # builds a static release binary for it
#   bash scripts/image.sh --binary PATH    # or takes one built already (static too)
#   buildah push lockstep docker://registry.example.com/lockstep:TAG
#
# `--binary` is for the tests: scripts/test.sh builds every test binary statically, and the
# image holds its lockstep, rather than a second compile of lockstep and all it depends on.
#
# Needs Debian's buildah, and root (buildah's storage and the files' owners). It pulls
# nothing: the image is FROM scratch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() { echo "usage: scripts/image.sh [--binary PATH]" >&2; exit 2; }
binary=
case "${1:-}" in
    "") ;;
    --binary) binary="${2:-}"; [[ -n $binary && $# == 2 ]] || usage ;;
    *) usage ;;
esac

# vfs and chroot: no overlay mounts and no runtime, so it builds inside a container too.
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot

# A static binary, since the image has no libc. musl would do too, but its C compiler is one
# more package; glibc (2.34 and later) links its files and dns name lookups in statically,
# which is all lockstep resolves names with. `--target` keeps RUSTFLAGS off the build scripts
# and proc macros (which cannot be static) and its output apart from target/release.
static=(--target x86_64-unknown-linux-gnu)
if [[ -z $binary ]]; then
    RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --release --bin lockstep -p lockstep "${static[@]}"
    binary="${CARGO_TARGET_DIR:-target}/${static[1]}/release/lockstep"
fi
[[ -f $binary ]] || { echo "no binary at $binary" >&2; exit 1; }
if readelf --program-headers "$binary" | grep -q INTERP; then
    echo "$binary asks for a dynamic loader: it would not start in an image without libc" \
        "(build it with RUSTFLAGS=\"-C target-feature=+crt-static\" and ${static[*]})" >&2
    exit 1
fi

out=target/image
context="$out/context"
rm -rf "$context" "$out/rootfs" "$out/inspect.json"
mkdir -p "$context/rootfs/usr/local/bin" "$context/rootfs/etc/ssl/certs" \
    "$context/rootfs/var/lib" "$context/rootfs/tmp" "$context/state/lockstep"
chmod 0700 "$context/state/lockstep"
chmod 1777 "$context/rootfs/tmp"
# Without its debug info: nothing debugs the image's binary, and a debug build's is most of
# its size, which buildah's vfs storage copies whole at every step.
objcopy --strip-debug "$binary" "$context/rootfs/usr/local/bin/lockstep"
cp deploy/image/passwd deploy/image/group deploy/image/nsswitch.conf "$context/rootfs/etc/"
# TLS to S3, etcd and Milvus verifies against the system's roots (rustls-native-certs reads
# this file); the build host's bundle is Debian's ca-certificates.
cp /etc/ssl/certs/ca-certificates.crt "$context/rootfs/etc/ssl/certs/"

old="$(buildah images --quiet --noheading lockstep 2>/dev/null || true)"
buildah build --quiet --layers=false -f deploy/Containerfile -t lockstep "$context" >/dev/null
new="$(buildah images --quiet --noheading lockstep)"
# Each build leaves the previous image untagged; vfs stores every layer whole, so drop it.
if [[ -n $old && $old != "$new" ]]; then buildah rmi "$old" >/dev/null || true; fi

# The image's filesystem as a container of it sees it, owners and modes included.
container="$(buildah from lockstep)"
trap 'buildah rm "$container" >/dev/null' EXIT
mkdir -p "$out/rootfs"
cp -a "$(buildah mount "$container")/." "$out/rootfs/"
buildah umount "$container" >/dev/null
buildah inspect --type image lockstep >"$out/inspect.json"
rm -rf "$context"
echo "image lockstep: $(du -sh "$out/rootfs" | cut -f1) (filesystem in $out/rootfs)"
