#!/usr/bin/env bash
# A Docker engine and compose for the compose cluster (docker-compose.yml): installs Debian's
# docker.io, docker-compose and debootstrap when missing, and starts dockerd when none answers
# (there is no systemd on the machines this is built on; where systemd runs, it is asked).
# Works on Debian 12 and 13. Measured on a 2-core Debian 12 machine: install ~35 s, dockerd
# ready in < 8 s.
#
# `compose-plugin [SUITE]` instead gets Docker's compose plugin (`docker compose`, compose v2)
# where the docker CLI has none (Debian 12 packages only compose v1, the `docker-compose`
# Python program): the docker-compose package of Debian's SUITE (default sid; trixie has
# compose 2.26, sid 2.40), a Go binary that is also a CLI plugin, fetched by apt inside the
# base image slurm-rl/debian:SUITE (made first if missing), so the host's apt sources stay as
# they are, and unpacked into .docker/cli-plugins/ of this checkout (git-ignored). The docker
# CLI finds it with DOCKER_CONFIG=<checkout>/.docker. Measured here: 10-15 s.
#
# Usage: scripts/docker-engine.sh                      (as root, or with passwordless sudo)
#        scripts/docker-engine.sh compose-plugin [SUITE]
set -euo pipefail

PLUGIN_CONFIG=$(cd "$(dirname "$0")/.." && pwd)/.docker

compose_plugin() {  # compose_plugin SUITE: see the head of this file
    local suite=$1 dir=$PLUGIN_CONFIG/cli-plugins
    if docker compose version >/dev/null 2>&1; then
        echo "docker-engine.sh: the docker CLI has $(docker compose version)"
        return 0
    fi
    if DOCKER_CONFIG=$PLUGIN_CONFIG docker compose version >/dev/null 2>&1; then
        echo "docker-engine.sh: $(DOCKER_CONFIG=$PLUGIN_CONFIG docker compose version)" \
             "is in $dir"
        return 0
    fi
    bash "$(dirname "$0")/docker-base.sh" "$suite" >/dev/null
    install -d "$dir"
    # The Release file of a sid mirror may be past its Valid-Until (seen here): retried
    # without that check, as the images' apt-update does.
    docker run --rm -v "$dir:/out" "slurm-rl/debian:$suite" sh -ec '
        apt-get update -qq 2>/dev/null || apt-get -o Acquire::Check-Valid-Until=false update -qq
        cd /tmp && apt-get download -qq docker-compose
        dpkg-deb --fsys-tarfile docker-compose_*.deb \
          | tar -xO ./usr/libexec/docker/cli-plugins/docker-compose > /out/docker-compose.new
        chmod 0755 /out/docker-compose.new'
    mv "$dir/docker-compose.new" "$dir/docker-compose"
    echo "docker-engine.sh: $(DOCKER_CONFIG=$PLUGIN_CONFIG docker compose version)" \
         "(Debian $suite) in $dir; use it with DOCKER_CONFIG=$PLUGIN_CONFIG"
}

if [[ ${1:-} == compose-plugin ]]; then
    compose_plugin "${2:-sid}"
    exit 0
fi

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
