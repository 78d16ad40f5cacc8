#!/usr/bin/env bash
# Install Debian's Slurm 22.05 packages (controller, node daemon, clients, slurmrestd, slurmdbd),
# munge and MariaDB.
#
# Idempotent and quick when everything is already there: it only calls apt when a
# package is missing. Never installs slurm-wlm-emulator: in Debian 12 it is broken
# and it takes over the slurmctld/slurmd alternatives.
#
# Usage: scripts/install-slurm.sh            (as root, or with sudo available)
set -euo pipefail

# slurm-wlm-basic-plugins (a hard Depends) already carries job_submit_lua, select_cons_tres,
# priority_multifactor, gres_gpu and jobcomp_filetxt, so no Recommends are needed.
# slurmdbd and mariadb-server: the dev cluster's accounting option (DevClusterConfig
# accounting=True: a private MariaDB and slurmdbd; the load test, tests/slurm/test_load_live.py)
# and the Operator test (tests/slurm/test_operator_live.py) need them; on a fresh machine
# about 18 MB, 18 packages with their Depends (~6 s to download, ~4 s to unpack, measured).
# lua5.1: the interpreter of the Lua that job_submit_lua.so links, for the plugin's own tests
# (tests/test_job_submit_lua.py).
PACKAGES=(slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins slurmrestd slurmdbd
          mariadb-server lua5.1)

# Not fatal without root: unit tests need no Slurm, and the integration tests skip.
source "$(dirname "$0")/apt-packages.sh"
apt_install_missing install-slurm.sh 0 "${PACKAGES[@]}"
if [[ $(id -u) -ne 0 ]]; then
    exit 0
fi

for tool in slurmctld slurmd sbatch squeue scontrol munged slurmdbd sacct sacctmgr mariadbd \
            mariadb-install-db mariadb; do
    if ! command -v "$tool" >/dev/null 2>&1 && [[ ! -x /usr/sbin/$tool ]]; then
        echo "install-slurm.sh: $tool still missing after install" >&2
        exit 1
    fi
done
