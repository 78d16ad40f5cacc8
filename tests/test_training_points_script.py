"""scripts/training_points.py, session 48's ship rule on the eight training points as a
script: each condition of the rule judged on figures made up to hold or fail it, figures read
back as written, and the script run end to end on a tiny input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from slurm_rl.training.sweep import RunFigures
from tests.scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "training_points.py"


def _script() -> ModuleType:
    return load_script("training_points")


def _runs(jct: float, fees: float = 100.0, wait: float = 1.0) -> list[RunFigures]:
    return [RunFigures("p", jct + d, 1.0, fees, 0.5, wait, 10) for d in (-0.1, 0.1)]


def _figures(cand: list[tuple[float, float, float]]) -> dict[str, dict[str, list[RunFigures]]]:
    base, shipped = (4.0, 4.0), (3.9, 4.05)  # shipped: 7.95 in sum, below the base at one point
    return {f"w@{i}": {"base": _runs(base[i]), "shipped": _runs(shipped[i]),
                       "cand": _runs(*cand[i])} for i in range(2)}


def _held(figures: dict[str, dict[str, list[RunFigures]]]) -> list[bool]:
    return [v.held for v in _script().judge(figures, "cand", "base", "shipped")]


def test_each_condition_of_the_rule_holds_or_fails_on_its_own() -> None:
    assert _held(_figures([(3.8, 100.0, 1.0), (4.0, 100.0, 2.0)])) == [True] * 4
    # 7.96 in sum: below the baseline's 8.0, not below the shipped bundle's 7.95
    assert _held(_figures([(3.9, 100.0, 1.0), (4.06, 100.0, 1.0)]))[0] is False
    assert _held(_figures([(3.8, 101.0, 1.0), (4.0, 100.0, 1.0)]))[1] is False  # dearer once
    # p99 wait: 1.5x the baseline's 1 h is 1.5 h, 1 h above it is 2 h: the larger holds
    assert _held(_figures([(3.8, 100.0, 2.0), (4.0, 100.0, 1.0)]))[2] is True
    assert _held(_figures([(3.8, 100.0, 2.01), (4.0, 100.0, 1.0)]))[2] is False
    # below the baseline at one point only where the shipped bundle is at one: holds; at none:
    assert _held(_figures([(3.5, 100.0, 1.0), (4.2, 100.0, 1.0)]))[3] is True
    assert _held(_figures([(4.01, 100.0, 1.0), (3.5, 100.0, 1.0)]))[3] is True
    assert _held(_figures([(4.01, 100.0, 1.0), (4.01, 100.0, 1.0)]))[3] is False


def test_the_script_writes_figures_it_reads_back_and_judges_them(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--trace", "synthetic", "--cluster", "tiny", "--days",
         "0.2", "--windows", "all", "--policies", "fifo+first-fit,sjf-limit+fastest-gpu",
         "--replicas", "2", "--workers", "1", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    written = json.loads(out.read_text())
    assert set(written) == {"all@0.85", "all@1"}
    assert [len(runs) for runs in written["all@1"].values()] == [2, 2]
    judged = subprocess.run(
        [sys.executable, str(SCRIPT), "--with", str(out), "--judge", "fifo+first-fit",
         "--incumbent", "fifo+first-fit"], cwd=ROOT, capture_output=True, text=True,
        timeout=120, check=False)
    assert judged.returncode == 0, judged.stdout[-2000:] + judged.stderr[-3000:]
    assert "session 48's rule" in judged.stdout and "sum of avg JCT" in judged.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--with", str(ROOT / "README.md")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode != 0 and "README.md: not a figures file" in bad.stderr
    assert "Traceback" not in bad.stderr
