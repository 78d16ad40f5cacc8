"""Training curves: a progress bar, one CSV row per iteration and per validation, and a plot."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn  # noqa: E402

from slurm_rl.training.rollout import Episode  # noqa: E402


class CurveLog:
    """``curves.csv`` (per iteration), ``validation.csv`` and ``curves.png`` in ``directory``."""

    def __init__(self, directory: Path, *, progress: bool = True) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, float | str]] = []
        self.validations: list[dict[str, float | str]] = []
        columns = (TextColumn("{task.description}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} episodes"), TimeElapsedColumn())
        self._progress = Progress(*columns, disable=not progress)
        self._task: TaskID | None = None

    def start(self, episodes: int) -> None:
        self._progress.start()
        self._task = self._progress.add_task("training", total=episodes)

    def episode_done(self, episode: Episode) -> None:
        if self._task is not None:
            self._progress.advance(self._task)

    def record(self, phase: str, iteration: int, episodes: Sequence[Episode],
               stats: Mapping[str, float], fee_weight: float) -> None:
        row: dict[str, float | str] = {
            "phase": phase,
            "iteration": iteration,
            "episodes": len(episodes),
            "decisions": float(np.mean([len(e.steps) for e in episodes])),
            "cost": float(np.mean([e.cost(fee_weight) for e in episodes])),
            "job_hours": float(np.mean([e.job_hours for e in episodes])),
            "fees": float(np.mean([e.fees for e in episodes])),
            "episode_wall_s": float(np.mean([e.wall_s for e in episodes])),
            **{k: round(v, 6) for k, v in stats.items()},
        }
        self.rows.append(row)
        self._write("curves.csv", self.rows)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in stats.items())
        self._progress.console.print(
            f"{phase} {iteration}: cost/episode {row['cost']:.1f} "
            f"(job-h {row['job_hours']:.1f}, fees {row['fees']:.0f}); {shown}", highlight=False)

    def validation(self, row: Mapping[str, float | str]) -> None:
        self.validations.append(dict(row))
        self._write("validation.csv", self.validations)

    def print(self, text: str) -> None:
        self._progress.console.print(text, highlight=False)

    def _write(self, name: str, rows: list[dict[str, float | str]]) -> None:
        keys: list[str] = []
        for row in rows:
            keys += [k for k in row if k not in keys]
        with (self.directory / name).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, keys)
            writer.writeheader()
            writer.writerows(rows)

    def finish(self) -> None:
        self._progress.stop()
        if self.rows:
            self._plot()

    def _plot(self) -> None:
        figure, axes = plt.subplots(1, 2, figsize=(11, 3.8))
        for phase, marker in (("bc", "s"), ("ppo", "o")):
            rows = [r for r in self.rows if r["phase"] == phase]
            index = [i for i, r in enumerate(self.rows) if r["phase"] == phase]
            axes[0].plot(index, [r["cost"] for r in rows], marker=marker, label=phase)
        axes[0].set(xlabel="iteration", ylabel="cost per episode (job-h + λ fees)",
                    title="training episodes")
        axes[0].legend()
        if self.validations:
            labels = [str(v["label"]) for v in self.validations]
            axes[1].plot(labels, [v["cost"] for v in self.validations], marker="o", label="agent")
            axes[1].plot(labels, [v["baseline_cost"] for v in self.validations], "--",
                         label=str(self.validations[0]["baseline"]))
            axes[1].tick_params(axis="x", rotation=45)
            axes[1].legend()
        axes[1].set(ylabel="validation cost (Σ JCT h + λ fees)", title="validation window")
        figure.savefig(self.directory / "curves.png", dpi=110, bbox_inches="tight")
        plt.close(figure)
