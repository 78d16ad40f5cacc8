"""The checks of issue 19's load (tests/slurm/load.py), shared by the live test and the
benchmark. Each reads what really happened, from three witnesses:

* the daemon's store (a copy taken after it stopped): every decision row, its argv, Slurm's
  exit status and answer;
* slurmctld's log (SlurmctldDebug=info): each job update it took, as ``set priority to P
  for JobId=N`` / ``setting req_nodes to X for JobId=N`` followed by ``_slurm_rpc_update_job:
  complete JobId=N uid=U`` (22.05.8, measured), so every update is tied to who sent it;
* sacct (slurmdbd): each job's submit, start and end times and the nodes it ran on.

The rules, one per check:

(a) pins: each job's last pin Slurm accepted (a row whose argv sets ``ReqNodeList``, rc 0)
    is the node list the job ran on; a refused pin has Slurm's answer and rc stored; an
    accepted pin that a later one replaced is counted apart (superseded).
(b) nothing lost: every pin slurmctld took from the daemon's user has a stored decision row
    for that job whose argv sets exactly that node list, across the SIGKILL and restart.
(c) one GPU type per untyped gang: an untyped request that ran on more than one node ran on
    one GPU type, when the daemon pinned it or released it without a pin (Slurm chose the
    nodes then, but after the daemon's call); gangs Slurm placed alone (the plugin's window
    ran out while no daemon ran) are listed apart.
(d) priority churn: no job got more than 2 priority updates from the daemon in any hour of
    its pending time (a job pending for less than an hour: 2 in all), counted from
    slurmctld's log; the store's count is shown beside it.
(e) fairness: the users' mean waits (start - submit, sacct) give Jain's index and the wait
    ratio (max / mean, slurm_rl.fairness); the ratio must be within the configured bound
    (``fairness_max_wait_ratio``) unless the most-waiting user's mean wait is under
    ``fairness_min_wait_s``, where the daemon's guard does not act either (jitter).
"""

from __future__ import annotations

import csv
import re
import shutil
import sqlite3
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from slurm_rl.config import DaemonConfig, load_config
from slurm_rl.fairness import outcome_fairness
from slurm_rl.slurm.actuator import slurm_time
from slurm_rl.slurm.hostlist import expand
from slurm_rl.slurm.scontrol import parse_local_time
from slurm_rl.store.exclusions import REQUIRED, field_value
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow
from tests.slurm import load
from tests.slurm.load import SLURM_USER, JobSpec, LoadPlan, LoadRun

PRIORITY_UPDATES_PER_HOUR = 2
HOUR_S = 3600.0
_STAMP = r"^\[(?P<at>[\d\-T:.]+)\] (?:sched: )?"
_SET = re.compile(_STAMP + r"_update_job: (?:set priority to (?P<priority>\d+)|setting req_nodes"
                  r" to (?P<nodes>\S+)) for JobId=(?P<job>\d+)$")
_DONE = re.compile(_STAMP + r"_slurm_rpc_update_job: (?P<ok>complete )?JobId=(?P<job>\d+)"
                   r" uid=(?P<uid>\d+)")


# -- the witnesses ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Update:
    """One job update slurmctld took: a priority or a pin, when and from whom."""

    at: float
    job_id: str
    field: str  # "Priority" or "ReqNodeList"
    value: str
    uid: int
    ok: bool


@dataclass(frozen=True, slots=True)
class Accounted:
    """A job as sacct has it."""

    user: str
    state: str
    submit: float
    start: float | None
    end: float | None
    nodes: frozenset[str]


@dataclass(frozen=True, slots=True)
class Stored:
    """One decision row of the daemon's store."""

    at: float  # the cycle's snapshot time
    job_id: str
    action: str
    argv: tuple[str, ...]
    rc: int | None
    answer: str | None
    nodes: str | None

    @property
    def pin(self) -> frozenset[str] | None:
        value = field_value(self.argv, REQUIRED)
        return frozenset(expand(value)) if value else None


def _log_time(stamp: str) -> float:
    whole, _, fraction = stamp.partition(".")
    seconds = parse_local_time(whole)
    assert seconds is not None, stamp
    return seconds + (float(f"0.{fraction}") if fraction else 0.0)


def ctld_updates(log: Path) -> list[Update]:
    """The priority and pin updates in slurmctld's log, each with the uid that sent it."""
    waiting: dict[str, list[tuple[float, str, str]]] = defaultdict(list)
    found: list[Update] = []
    for line in log.read_text(errors="replace").splitlines():
        if (setting := _SET.match(line)) is not None:
            name, value = (("Priority", setting["priority"]) if setting["priority"]
                           else (REQUIRED, setting["nodes"]))
            waiting[setting["job"]].append((_log_time(setting["at"]), name, value))
        elif (done := _DONE.match(line)) is not None:
            for at, name, value in waiting.pop(done["job"], []):
                found.append(Update(at, done["job"], name, value, int(done["uid"]),
                                    bool(done["ok"])))
    return found


def sacct_jobs(run: LoadRun, timeout_s: float = 90.0) -> dict[str, Accounted]:
    """sacct's records of the run's jobs, once slurmdbd holds every end (it gets them from
    slurmctld in its own time)."""
    fields = "JobIDRaw,User,State,Submit,Start,End,NodeList"
    argv = ["sacct", "-X", "-n", "-P", "-a", f"--jobs={','.join(run.jobs)}",
            f"--starttime={slurm_time(run.started_at - 60)}", "--endtime=now",
            f"--format={fields}"]
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run(argv, env=run.cluster.client_env(), capture_output=True,
                              text=True, timeout=60, check=False)
        found = _parse_sacct(done.stdout) if done.returncode == 0 else {}
        ended = all(j in found and found[j].end is not None for j in run.jobs)
        if ended or time.monotonic() > deadline:
            return found
        time.sleep(1.0)


def _parse_sacct(text: str) -> dict[str, Accounted]:
    found = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 7:
            continue
        job_id, user, state, submit, start, end, nodes = parts
        ran = nodes not in ("", "None assigned")
        found[job_id] = Accounted(user, state.split()[0], parse_local_time(submit) or 0.0,
                                  parse_local_time(start), parse_local_time(end),
                                  frozenset(expand(nodes)) if ran else frozenset())
    return found


def stored_decisions(store_file: Path, copy_to: Path) -> list[Stored]:
    """Every decision row, read from a copy of the store (SQLite's backup: the daemon's own
    files are left as they are)."""
    source = sqlite3.connect(f"file:{store_file}?mode=ro", uri=True)
    target = sqlite3.connect(copy_to)
    with source, target:
        source.backup(target)
    source.close()
    target.close()
    engine = create_engine(f"sqlite:///{copy_to}")
    query = (select(CycleRow.snapshot_time, JobRow.job_id, DecisionRow.action, DecisionRow.argv,
                    DecisionRow.slurm_rc, DecisionRow.slurm_answer, DecisionRow.nodes)
             .join(CycleRow, DecisionRow.cycle_id == CycleRow.id)
             .join(JobRow, DecisionRow.job_key == JobRow.job_key)
             .order_by(DecisionRow.id))
    with Session(engine) as session:
        rows = [Stored(at, job, action, tuple(argv or ()), rc, answer, nodes)
                for at, job, action, argv, rc, answer, nodes in session.execute(query)]
    engine.dispose()
    return rows


@dataclass
class Evidence:
    """The three witnesses of one run, and what the checks need besides."""

    jobs: Mapping[str, JobSpec]
    updates: list[Update]
    accounted: dict[str, Accounted]
    stored: list[Stored]
    node_types: Mapping[str, str]
    daemon_uid: int
    config: DaemonConfig  # the one the daemon ran with (the fairness bound)

    @property
    def daemon_updates(self) -> list[Update]:
        return [u for u in self.updates if u.uid == self.daemon_uid and u.ok]


def gather(run: LoadRun, scratch: Path) -> Evidence:
    import pwd

    cluster = run.cluster
    return Evidence(
        jobs=run.jobs,
        updates=ctld_updates(cluster.root / "log" / "slurmctld.log"),
        accounted=sacct_jobs(run),
        stored=stored_decisions(run.daemon.store_file, scratch / f"{run.daemon.state.name}.db"),
        node_types={node.name: node.gpu_type for node in cluster.config.nodes()},
        daemon_uid=pwd.getpwnam(SLURM_USER).pw_uid,
        config=load_config(run.daemon.config_file),
    )


# -- the checks -------------------------------------------------------------------------


@dataclass
class CheckResult:
    name: str
    figures: dict[str, object]
    problems: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        verdict = "ok  " if self.passed else "FAIL"
        shown = ", ".join(f"{key} {value}" for key, value in self.figures.items())
        out = [f"{verdict} {self.name}: {shown}"]
        out += [f"     problem: {problem}" for problem in self.problems[:10]]
        if len(self.problems) > 10:
            out.append(f"     ... and {len(self.problems) - 10} more")
        out += [f"     note: {note}" for note in self.notes[:10]]
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def check_pins(ev: Evidence) -> CheckResult:
    """(a) each job's last accepted pin is where it ran; the others carry Slurm's answer."""
    by_job: dict[str, list[Stored]] = defaultdict(list)
    for row in ev.stored:
        if row.pin is not None:
            by_job[row.job_id].append(row)
    problems: list[str] = []
    answers: list[str] = []
    counts: Counter[str] = Counter()
    for job_id, rows in sorted(by_job.items(), key=lambda item: int(item[0])):
        accepted = [row for row in rows if row.rc == 0]
        for row in rows:
            counts[_pin_fate(row)] += 1
            if _pin_fate(row) == "unanswered":
                problems.append(f"job {job_id}: pin {row.nodes} stored with neither an exit "
                                "status nor an answer")
            elif row.rc != 0:
                answers.append(f"job {job_id} {row.nodes}: rc {row.rc}, {row.answer}")
        counts["superseded"] += max(0, len(accepted) - 1)
        if accepted:
            problem = _ran_where_pinned(job_id, accepted[-1], ev.accounted.get(job_id))
            counts["ran where pinned" if problem is None else "ran elsewhere"] += 1
            problems += [problem] if problem else []
    most = max((sum(r.rc == 0 for r in rows) for rows in by_job.values()), default=0)
    figures: dict[str, object] = {"pins stored": sum(len(r) for r in by_job.values()),
                                  "jobs pinned": len(by_job), **counts,
                                  "most accepted on one job": most}
    return CheckResult("every pin is the job's node list or a recorded refusal", figures,
                       problems, answers)


def _pin_fate(row: Stored) -> str:
    """accepted (rc 0); refused (rc and answer); not sent, recorded as such (no rc, an
    answer: the journal's ``not_applied`` for a call a killed cycle never sent); unanswered."""
    if row.rc == 0:
        return "accepted"
    if row.answer:
        return "refused" if row.rc is not None else "not sent (recorded)"
    return "unanswered"


def _ran_where_pinned(job_id: str, pin: Stored, ran: Accounted | None) -> str | None:
    if ran is None or not ran.nodes:
        return f"job {job_id}: pinned to {pin.nodes}, never ran"
    if ran.nodes != pin.pin:
        return f"job {job_id}: pinned to {sorted(pin.pin or ())}, ran on {sorted(ran.nodes)}"
    return None


def check_nothing_lost(ev: Evidence) -> CheckResult:
    """(b) each pin slurmctld took from the daemon has a stored row with that pin."""
    stored: dict[str, set[frozenset[str]]] = defaultdict(set)
    for row in ev.stored:
        if row.pin is not None:
            stored[row.job_id].add(row.pin)
    pins = [u for u in ev.daemon_updates if u.field == REQUIRED and u.value != "(null)"]
    problems = [f"job {u.job_id}: Slurm took ReqNodeList={u.value} at "
                f"{time.strftime('%H:%M:%S', time.localtime(u.at))}; no stored decision has it"
                for u in pins if frozenset(expand(u.value)) not in stored.get(u.job_id, set())]
    figures: dict[str, object] = {"pins Slurm took": len(pins),
                                  "with a stored decision": len(pins) - len(problems),
                                  "lost": len(problems)}
    return CheckResult("0 decisions lost across the SIGKILL (pins Slurm holds are stored)",
                       figures, problems)


def check_one_type_per_gang(ev: Evidence) -> CheckResult:
    """(c) untyped requests that ran on several nodes ran on one GPU type."""
    pinned = {row.job_id for row in ev.stored if row.rc == 0 and row.pin is not None}
    released = {row.job_id for row in ev.stored if row.rc == 0 and "StartTime=now" in row.argv}
    gangs, counts, problems, notes = 0, Counter[str](), list[str](), list[str]()
    for job_id, spec in ev.jobs.items():
        ran = ev.accounted.get(job_id)
        if spec.gpu_type is not None or ran is None or len(ran.nodes) < 2:
            continue
        gangs += 1
        types = sorted({ev.node_types.get(node, "?") for node in ran.nodes})
        if len(types) == 1:
            continue
        how = ("on the daemon's pin" if job_id in pinned else
               "after a release without a pin" if job_id in released else "by Slurm alone")
        counts[f"mixed {how}"] += 1
        line = f"job {job_id} ({' '.join(spec.options())}) ran on {', '.join(types)} {how}"
        (notes if how == "by Slurm alone" else problems).append(line)
    figures: dict[str, object] = {"untyped gangs run": gangs, **counts}
    return CheckResult("0 mixed-type gangs for untyped requests", figures, problems, notes)


def max_in_window(times: Sequence[float], window_s: float) -> int:
    """The most of ``times`` that fall in any interval of ``window_s``."""
    ordered, most, first = sorted(times), 0, 0
    for last, at in enumerate(ordered):
        while at - ordered[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def check_priority_rate(ev: Evidence) -> CheckResult:
    """(d) at most 2 priority updates per job in any hour of its pending time."""
    sent: dict[str, list[float]] = defaultdict(list)
    for update in ev.daemon_updates:
        if update.field == "Priority":
            sent[update.job_id].append(update.at)
    stored = Counter(row.job_id for row in ev.stored if row.rc == 0
                     and any(a.startswith("Priority=") for a in row.argv))
    peaks = {job_id: max_in_window(times, HOUR_S) for job_id, times in sent.items()}
    problems = [f"job {job_id}: {peak} priority updates within an hour (log), "
                f"{stored.get(job_id, 0)} stored" for job_id, peak in sorted(
                    peaks.items(), key=lambda item: int(item[0]))
                if peak > PRIORITY_UPDATES_PER_HOUR]
    pending_h = [(a.start - a.submit) / HOUR_S for j, a in ev.accounted.items()
                 if j in ev.jobs and a.start is not None]
    figures: dict[str, object] = {
        "updates (log)": sum(len(t) for t in sent.values()),
        "updates (store)": sum(stored.values()), "jobs updated": len(sent),
        "most per job-hour": max(peaks.values(), default=0),
        "per job": dict(sorted(Counter(peaks.values()).items())),
        "pending job-hours": round(sum(pending_h), 3), "jobs over 2": len(problems)}
    return CheckResult("priority updates <= 2 per pending job per hour", figures, problems)


def check_fairness(ev: Evidence) -> CheckResult:
    """(e) the wait ratio within the configured bound (module docstring for the rule)."""
    waits = [(a.user, a.start - a.submit) for j, a in ev.accounted.items()
             if j in ev.jobs and a.start is not None]
    fair = outcome_fairness(waits)
    bound, floor = ev.config.fairness_max_wait_ratio, ev.config.fairness_min_wait_s
    figures: dict[str, object] = {
        "mean wait by user (s)": {u: round(w, 1) for u, w in sorted(fair.mean_wait_s.items())},
        "Jain": round(fair.jain_index, 3), "wait ratio": round(fair.wait_ratio, 3),
        "bound": bound}
    problems: list[str] = []
    notes: list[str] = []
    if bound and fair.wait_ratio > bound:
        if fair.longest_mean_wait_s >= floor:
            problems.append(f"wait ratio {fair.wait_ratio:.2f} over the bound {bound:g}")
        else:
            notes.append(f"wait ratio {fair.wait_ratio:.2f} over {bound:g}, but the longest "
                         f"mean wait ({fair.longest_mean_wait_s:.0f} s) is under the guard's "
                         f"{floor:g} s")
    return CheckResult("the fairness metric within the configured bound", figures, problems,
                       notes)


CHECKS = (check_pins, check_nothing_lost, check_one_type_per_gang, check_priority_rate,
          check_fairness)


def evaluate(ev: Evidence) -> dict[str, CheckResult]:
    """Every check by its function's name."""
    return {check.__name__: check(ev) for check in CHECKS}


def run_figures(run: LoadRun, ev: Evidence) -> list[str]:
    """The run's own figures (timings and counts), for the benchmark's printout."""
    ran = [a for j, a in ev.accounted.items() if j in run.jobs and a.start is not None]
    waits = sorted(a.start - a.submit for a in ran if a.start is not None)
    kills = "; ".join(f"SIGKILL {k.killed_at - k.armed_at:.2f} s after the burst, successor "
                      f"beat after {k.restart_s:.2f} s" for k in run.kills) or "no SIGKILL"
    return [
        f"{run.policy}: {len(run.jobs)} jobs, {len(ran)} ran, drained {run.drained}, "
        f"makespan {run.makespan_s:.1f} s, daemon exit {run.exit_code}",
        f"  submit per burst: {_spread(run.submit_s)} s; daemon start {run.first_start_s:.2f} s",
        f"  wait (start - submit): median {_pick(waits, 0.5):.1f} s, p95 "
        f"{_pick(waits, 0.95):.1f} s, max {_pick(waits, 1.0):.1f} s",
        f"  {kills}",
        f"  decisions stored {len(ev.stored)}: " + ", ".join(
            f"{k} {n}" for k, n in sorted(Counter(r.action for r in ev.stored).items())),
    ]


def _spread(values: Iterable[float]) -> str:
    ordered = sorted(values)
    return f"{ordered[0]:.2f}-{ordered[-1]:.2f}" if ordered else "-"


def _pick(ordered: Sequence[float], share: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(share * (len(ordered) - 1) + 0.5))]


def save_witnesses(run: LoadRun, evidence: Evidence, target: Path) -> None:
    """slurmctld's and the daemon's logs beside the figures (a failed check's evidence), and
    ``jobs.csv``: each job's request, sacct's times and whether it ran where the daemon
    pinned it last (who waited, and why, without a cluster to ask)."""
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy(run.cluster.root / "log" / "slurmctld.log", target / "slurmctld.log")
    shutil.copy(run.daemon.log, target / run.daemon.log.name)
    pinned: dict[str, str] = {}
    for row in evidence.stored:
        if row.action == "place" and row.nodes:
            pinned[row.job_id] = row.nodes
    with open(target / "jobs.csv", "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["job", "user", "gpus", "kind", "sleep_s", "submit", "start", "end",
                         "nodes", "pinned"])
        for job_id, spec in sorted(run.jobs.items(), key=lambda item: int(item[0])):
            acct = evidence.accounted.get(job_id)
            times = (acct.submit, acct.start, acct.end) if acct else (None, None, None)
            nodes = ",".join(sorted(acct.nodes)) if acct else ""
            writer.writerow([job_id, spec.user, spec.gpus, spec.kind, spec.sleep_s, *times,
                             nodes, pinned.get(job_id, "")])


@dataclass
class Measured:
    """One policy's run under the load: the run, its witnesses and the checks' verdicts."""

    run: LoadRun
    evidence: Evidence
    results: dict[str, CheckResult]
    up_s: float
    down_s: float = 0.0


def measure(plan: LoadPlan, policy: str, scratch: Path, drain_timeout_s: float,
            keep: Path | None = None) -> Measured:
    """A fresh accounting cluster, the load under ``policy``, the checks, the cluster down
    (``keep``: slurmctld's and the daemon's logs are copied there first)."""
    users = tuple(dict.fromkeys(spec.user for spec in plan.jobs))
    with load.accounting_cluster(users) as (cluster, up_s):
        run = load.run_load(cluster, plan, policy, drain_timeout_s)
        evidence = gather(run, scratch)
        if keep is not None:
            save_witnesses(run, evidence, keep / policy.replace("+", "-"))
        stopping = time.monotonic()
    measured = Measured(run, evidence, evaluate(evidence), up_s)
    measured.down_s = time.monotonic() - stopping
    return measured
