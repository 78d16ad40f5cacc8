#!/bin/sh
# Entry point of every container of the compose cluster: start munge, then one role.
#   slurm-rl-entrypoint slurmctld | slurmdbd | slurmd | client <command...>
set -eu

ROLE=${1:?role: slurmctld, slurmdbd, slurmd or client}
shift

KEY=/etc/munge/munge.key

wait_for() {  # wait_for <what> <test...>: poll for up to 60 s
    what=$1; shift
    i=0
    until "$@"; do
        i=$((i + 1))
        if [ "$i" -gt 300 ]; then echo "timed out waiting for $what" >&2; exit 1; fi
        sleep 0.2
    done
}

start_munge() {
    # The controller creates the shared key once; everyone else waits for it.
    if [ "$ROLE" = slurmctld ] && [ ! -s "$KEY" ]; then
        dd if=/dev/urandom of="$KEY.tmp" bs=1024 count=1 2>/dev/null
        mv "$KEY.tmp" "$KEY"
    fi
    wait_for "the munge key" test -s "$KEY"
    chown munge:munge "$KEY" && chmod 0400 "$KEY"
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
}

deferral_config() {
    # Read by job_submit.lua on every submission (see plugins/job_submit.lua).
    cat > /etc/slurm/job_submit_slurm_rl.conf <<CONF
heartbeat_path = ${SLURM_RL_HEARTBEAT:-/var/lib/slurm-rl/heartbeat}
heartbeat_max_age = ${SLURM_RL_HEARTBEAT_MAX_AGE:-30}
window = ${SLURM_RL_DEFER_WINDOW:-10}
partitions = ${SLURM_RL_PARTITIONS:-gpu}
gpu_only = yes
CONF
    chmod 0644 /etc/slurm/job_submit_slurm_rl.conf
}

cgroup_config() {
    # No systemd and no writable cgroup tree in an unprivileged container: Slurm 23.02+
    # runs without a cgroup plugin (with proctrack/linuxproc and task/none nothing needs
    # one); 22.05 knows no "disabled" and gets its own cgroup/v1 plugin.
    version=$(slurmd -V | sed -n 's/^slurm[^0-9]*\([0-9]*\)\.\([0-9]*\).*/\1\2/p')
    if [ "${version:-0}" -ge 2302 ]; then
        printf 'CgroupPlugin=disabled\n' > /etc/slurm/cgroup.conf
    else
        printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' > /etc/slurm/cgroup.conf
    fi
}

fake_gpus() {
    # Placeholder char devices stand in for GPUs (same numbers as /dev/null; TaskPlugin=task/none
    # never opens them). slurmd drops GPUs that have no File=.
    i=0
    while [ "$i" -lt 8 ]; do
        [ -e "/dev/nvidia$i" ] || mknod "/dev/nvidia$i" c 1 3
        i=$((i + 1))
    done
}

start_munge
cgroup_config
case "$ROLE" in
    slurmdbd)
        install -m 0600 -o slurm -g slurm /etc/slurm/slurmdbd.conf.in /etc/slurm/slurmdbd.conf
        exec /usr/sbin/slurmdbd -D
        ;;
    slurmctld)
        deferral_config
        # Register the cluster with slurmdbd before the controller first talks to it.
        wait_for slurmdbd sacctmgr -i show cluster
        sacctmgr -i add cluster slurmrl >/dev/null 2>&1 || true
        exec /usr/sbin/slurmctld -D
        ;;
    slurmd)
        fake_gpus
        wait_for slurmctld scontrol ping
        exec /usr/sbin/slurmd -D
        ;;
    client)
        wait_for slurmctld scontrol ping
        exec "$@"
        ;;
    *)
        echo "unknown role $ROLE" >&2
        exit 2
        ;;
esac
