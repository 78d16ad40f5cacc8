#!/usr/bin/env bash
# The base images of the compose cluster, slurm-rl/debian:<suite>, without a registry:
# a pulled debian:<suite>-slim where a registry answers, else debootstrap --variant=minbase
# from Debian's archive and `docker import`. An image already there is kept.
# Suites: bookworm (Slurm 22.05), trixie (24.11), sid (26.05).
# Measured on a 2-core Debian 12 machine: debootstrap + import 41 s (trixie), 53 s (sid).
#
# Usage: scripts/docker-base.sh SUITE...    (as root: debootstrap needs it)
#   MIRROR=http://deb.debian.org/debian (default)
set -euo pipefail

MIRROR=${MIRROR:-http://deb.debian.org/debian}
[[ $# -gt 0 ]] || set -- bookworm trixie sid

for suite in "$@"; do
    case $suite in
        bookworm|trixie|sid) ;;
        *) echo "docker-base.sh: unknown suite '$suite' (bookworm, trixie or sid)" >&2; exit 2 ;;
    esac
    image=slurm-rl/debian:$suite
    if docker image inspect "$image" >/dev/null 2>&1; then
        echo "docker-base.sh: $image is there"
        continue
    fi
    started=$SECONDS
    if timeout 120 docker pull -q "debian:$suite-slim" >/dev/null 2>&1; then
        docker tag "debian:$suite-slim" "$image"
        echo "docker-base.sh: $image from debian:$suite-slim ($((SECONDS - started)) s)"
        continue
    fi
    root=$(mktemp -d /var/tmp/slurm-rl-rootfs.XXXXXX)
    trap 'rm -rf "$root"' EXIT
    if ! debootstrap --variant=minbase "$suite" "$root" "$MIRROR" > "$root.log" 2>&1; then
        echo "docker-base.sh: debootstrap $suite failed; the end of $root.log:" >&2
        tail -5 "$root.log" >&2
        exit 1
    fi
    tar -C "$root" -c . | docker import - "$image" >/dev/null
    rm -rf "$root" "$root.log"
    trap - EXIT
    echo "docker-base.sh: $image by debootstrap ($((SECONDS - started)) s)"
done
