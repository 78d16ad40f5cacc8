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

# Not fatal: without the packages the PostgreSQL tests skip with a reason.
source "$(dirname "$0")/apt-packages.sh"
apt_install_missing install-postgres.sh 0 "${PACKAGES[@]}"
