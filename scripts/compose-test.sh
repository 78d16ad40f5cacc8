#!/usr/bin/env bash
# The live suite against the docker-compose cluster, once per Slurm version: starts dockerd
# when none runs, makes the base images (debootstrap when no registry answers), builds the
# images, brings one compose project up per suite, runs the compose part of the live suite
# against it (pytest --slurm-cluster=compose) and takes it down again, then prints what each
# step took.
#
# Usage: scripts/compose-test.sh [SUITE...]      (as root; default: trixie sid)
#   bookworm = Slurm 22.05, trixie = 24.11, sid = 26.05
#   COMPOSE_TESTS="tests/slurm/test_live.py ..."  the tests to run (default below)
#   PYTEST_ARGS="-x"                              more pytest arguments
# Exit status: pytest's worst, or 1 when a cluster did not come up.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[[ $# -gt 0 ]] || set -- trixie sid
# What of the live suite runs against compose (the rest needs the native cluster's files,
# processes or a host-side Slurm client, and skips there): see docs/slurm.md.
DEFAULT_TESTS="tests/slurm/test_live.py tests/slurm/test_daemon_live.py
    tests/slurm/test_waiting_live.py tests/slurm/test_nodelist_live.py
    tests/slurm/test_reservations_live.py tests/slurm/test_exclusions_live.py
    tests/slurm/test_migration_live.py tests/slurm/test_plugin_files_live.py"
COMPOSE_TESTS=${COMPOSE_TESTS:-$DEFAULT_TESTS}

if [[ $(id -u) -ne 0 ]]; then
    echo "compose-test.sh: needs root (dockerd, debootstrap); skipped" >&2
    exit 0
fi

timings=()
step() {  # step NAME COMMAND...: run it, note how long it took
    local name=$1 started=$SECONDS
    shift
    "$@"
    local rc=$?
    timings+=("$(printf '%-34s %4d s%s' "$name" $((SECONDS - started)) \
                 "$([[ $rc -ne 0 ]] && echo "  (exit $rc)")")")
    return $rc
}

status=0
step "docker engine" bash scripts/docker-engine.sh || exit 1
step "base images ($*)" bash scripts/docker-base.sh "$@" || exit 1
for suite in "$@"; do
    project=slurm-rl-test-$suite
    export SLURM_RL_DEBIAN=$suite SLURM_RL_COMPOSE_PROJECT=$project
    compose=(docker-compose -p "$project")
    if docker compose version >/dev/null 2>&1; then compose=(docker compose -p "$project"); fi
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
    if ! step "$suite: build images" "${compose[@]}" build -q \
        || ! step "$suite: up" "${compose[@]}" up -d --quiet-pull; then
        status=1
        continue
    fi
    # shellcheck disable=SC2086
    step "$suite: live suite" "$PY" -m pytest -q -m slurm --slurm-cluster=compose \
        -p no:randomly ${PYTEST_ARGS:-} $COMPOSE_TESTS
    rc=$?
    [[ $rc -gt $status ]] && status=$rc
    step "$suite: down" "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
done
echo "compose-test.sh: what each step took"
printf '  %s\n' "${timings[@]}"
exit $status
