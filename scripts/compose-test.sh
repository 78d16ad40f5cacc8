#!/usr/bin/env bash
# The live suite against the docker-compose cluster, once per Slurm version: starts dockerd
# when none runs, makes the base images (debootstrap when no registry answers), checks that
# each compose program accepts docker-compose.yml, builds the images, brings one compose
# project up per suite, runs the compose part of the live suite against it
# (pytest --slurm-cluster=compose) and takes it down again, then prints what each step took.
#
# Usage: scripts/compose-test.sh [SUITE...]      (as root; default: trixie sid)
#   bookworm = Slurm 22.05, trixie = 24.11, sid = 26.05
#   COMPOSE="v1 v2"   the compose programs the suites take in turn (default: the first suite
#                     v1, the second v2, ...): v1 is the `docker-compose` command (Debian 12:
#                     compose 1.29.2, Python), v2 Docker's plugin `docker compose`, fetched
#                     from Debian's COMPOSE_PLUGIN_SUITE (default sid: compose 2.40) into
#                     .docker/ when the docker CLI has none (scripts/docker-engine.sh)
#   COMPOSE_TESTS="tests/slurm/test_live.py ..."  the tests to run on every suite
#   COMPOSE_LAST_TESTS="..."                      and on the last suite only, first (CI time)
#   PYTEST_ARGS="-x"                              more pytest arguments
#   COMPOSE_PROJECT_PREFIX=slurm-rl-test          the projects are PREFIX-SUITE
# Exit status: pytest's worst, or 1 when a cluster did not come up or a compose program
# refused the file.
set -uo pipefail

cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[[ $# -gt 0 ]] || set -- trixie sid
# What of the live suite runs against compose. The rest cannot (each skips there, saying
# why): the fault suite and the unreachable test drive slurmctld's process and run a daemon
# process on the host sharing the cluster's files; least privilege, operator, RWGP, load and
# replay start native clusters of their own (another slurmctld user, a slurmdbd they set
# up, k80 nodes, a long load, another SchedulerType); the ops commands read the cluster's
# slurm.conf on the host; no slurmrestd runs in the compose cluster; the README trial runs
# the README's commands on the host. See docs/compose.md.
DEFAULT_TESTS="tests/slurm/test_live.py tests/slurm/test_daemon_live.py
    tests/slurm/test_waiting_live.py tests/slurm/test_nodelist_live.py
    tests/slurm/test_reservations_live.py tests/slurm/test_exclusions_live.py
    tests/slurm/test_migration_live.py tests/slurm/test_plugin_files_live.py
    tests/slurm/test_accounting_live.py tests/slurm/test_shrink_live.py
    tests/slurm/test_nice_live.py"
# Retraining (75 s to 5 min a run, most of it training, not Slurm) runs on one version only,
# and first: its daemon learns from every finished job squeue shows (MinJobAge=300 s), so the
# jobs of the tests before it would enter its retrain window (run last, it found 70 jobs
# there instead of its own 20, its gate saw 0.0% between the policies and did not promote).
DEFAULT_LAST_TESTS="tests/slurm/test_retrain_live.py"
COMPOSE_TESTS=${COMPOSE_TESTS:-$DEFAULT_TESTS}
COMPOSE_LAST_TESTS=${COMPOSE_LAST_TESTS-$DEFAULT_LAST_TESTS}
read -ra programs <<< "${COMPOSE:-v1 v2}"

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
    timings+=("$(printf '%-40s %4d s%s' "$name" $((SECONDS - started)) \
                 "$([[ $rc -ne 0 ]] && echo "  (exit $rc)")")")
    return $rc
}

quietly() {  # quietly COMMAND...: its output only when it fails (compose v2 prints progress)
    local out rc
    out=$("$@" 2>&1)
    rc=$?
    [[ $rc -ne 0 ]] && printf '%s\n' "$out" | tail -20 >&2
    return $rc
}

compose_argv() {  # compose_argv v1|v2: the program's argv, in the array `compose`
    case $1 in
        v1) compose=(docker-compose) ;;
        v2) compose=(docker compose) ;;
        *) echo "compose-test.sh: COMPOSE names '$1': v1 or v2" >&2; return 2 ;;
    esac
}

plugin() {  # Docker's compose plugin: the CLI's own, else Debian's in .docker/
    docker compose version >/dev/null 2>&1 && return 0
    bash scripts/docker-engine.sh compose-plugin "${COMPOSE_PLUGIN_SUITE:-sid}" || return 1
    export DOCKER_CONFIG=$PWD/.docker
}

take_down() {  # take_down PROJECT: containers and volumes gone; compose v2 labels each
    # service's copy of the shared slurm image with the project and service, so all but the
    # tagged one are left untagged: those of this project go too (plain prune: only untagged)
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || return 1
    docker image prune -f --filter "label=com.docker.compose.project=$1" >/dev/null
}

config_check() {  # config_check v1|v2: the program accepts the file (the daemon profile too)
    local compose
    compose_argv "$1" || return 2
    echo "compose-test.sh: $1 is $("${compose[@]}" version --short 2>/dev/null)"
    "${compose[@]}" -f docker-compose.yml --profile daemon config -q
}

status=0
step "docker engine" bash scripts/docker-engine.sh || exit 1
step "base images ($*)" bash scripts/docker-base.sh "$@" || exit 1
for program in $(printf '%s\n' "${programs[@]}" | sort -u); do
    if [[ $program == v2 ]]; then
        step "compose plugin" plugin || exit 1
    fi
    step "$program: config" config_check "$program" || status=1
done
index=0
for suite in "$@"; do
    program=${programs[index % ${#programs[@]}]}
    index=$((index + 1))
    compose_argv "$program" || exit 2
    project=${COMPOSE_PROJECT_PREFIX:-slurm-rl-test}-$suite
    export SLURM_RL_DEBIAN=$suite SLURM_RL_COMPOSE_PROJECT=$project SLURM_RL_COMPOSE=$program
    compose+=(-p "$project")
    tests=$COMPOSE_TESTS
    [[ $index -eq $# ]] && tests="$COMPOSE_LAST_TESTS $tests"
    "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1
    if ! step "$suite ($program): build images" quietly "${compose[@]}" build -q \
        || ! step "$suite ($program): up" quietly "${compose[@]}" up -d --quiet-pull; then
        status=1
        continue
    fi
    # shellcheck disable=SC2086
    step "$suite ($program): live suite" "$PY" -m pytest -q -m slurm --slurm-cluster=compose \
        -p no:randomly ${PYTEST_ARGS:-} $tests
    rc=$?
    [[ $rc -gt $status ]] && status=$rc
    step "$suite ($program): down" take_down "$project"
done
echo "compose-test.sh: what each step took"
printf '  %s\n' "${timings[@]}"
exit $status
