#!/usr/bin/env bash
# Install Debian's PostgreSQL server packages (for the store's PostgreSQL tests).
#
# Idempotent and quick when already installed. The tests never use the system's own
# cluster: a session fixture (tests/pg.py) runs a private server in a temporary directory.
# The Python driver (psycopg, binary wheel) comes with pip install -e '.[dev]'.
#
# Usage: scripts/install-postgres.sh            (as root, or with sudo available)
set -euo pipefail

PACKAGES=(postgresql postgresql-client)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        exec sudo -n "$0" "$@"
    fi
    # Not fatal: the PostgreSQL tests skip with a reason.
    echo "install-postgres.sh: not root and no passwordless sudo; not installing ${missing[*]}" >&2
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-postgres.sh: no apt-get here; install PostgreSQL 13+ yourself" >&2
    exit 0
fi

echo "install-postgres.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d keeps the package from starting the system cluster (no systemd here, and the
# tests never use it).
policy=/usr/sbin/policy-rc.d
created=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created=1
fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if [[ $created -eq 1 ]]; then rm -f "$policy"; fi
