"""Replays side by side: the one process pool of ``slurm-rl simulate``, ``evaluate`` and the
load sweep.

Workers are spawned, never forked: torch and fork do not mix (a forked child can inherit a
lock held by one of the parent's OpenMP threads). Each replay starts from
:func:`fresh_replay_state`, so a figure never depends on which worker ran which replays
before it. The progress bar counts finished replays and, through :func:`decision_tick` (a
replay's ``on_cycle``), the decisions made so far in every worker.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, TypeVar

import numpy as np
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

A = TypeVar("A")
B = TypeVar("B")
T = TypeVar("T")

# In a pool worker: the decisions counter shared with the parent (None elsewhere).
_decisions: Any = None


def fresh_replay_state(seed: int = 0) -> None:
    """The process state every replay starts from, whatever ran before it in this process (a
    pool worker runs several, in an order that depends on timing): one torch thread (a
    parallel reduction adds its partial sums in an order that depends on the thread count)
    and the global generators of torch, numpy and ``random`` seeded. No policy should draw from
    those generators; one that did would otherwise depend on the replays before it."""
    import torch  # lazy: a heuristic replay needs no torch

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)  # the legacy global generator, which np.random.* functions use
    random.seed(seed)


def decision_tick() -> None:
    """A replay's ``on_cycle``: one decision more on the progress bar (nothing outside a
    pool worker)."""
    if _decisions is not None:
        with _decisions.get_lock():
            _decisions.value += 1


def pool_map(function: Callable[[A, B], T], tasks: Sequence[tuple[A, B]], workers: int, *,
             progress: bool = False) -> list[T]:
    """``function(*task)`` of every task, in task order: in this process with one worker (no
    progress bar then; easy to profile), else in up to ``workers`` spawned processes.
    ``function`` must be a module-level function (it is pickled by name) that starts each
    replay from :func:`fresh_replay_state` and may count its decisions with
    :func:`decision_tick`."""
    if not tasks:
        return []
    if workers <= 1:
        return [function(*task) for task in tasks]
    context = multiprocessing.get_context("spawn")
    counter = context.Value("q", 0)
    with ProcessPoolExecutor(max(1, min(workers, len(tasks))), context, _init_worker,
                             (counter,)) as pool:
        futures = [pool.submit(function, *task) for task in tasks]
        _wait(futures, counter, progress)
        return [future.result() for future in futures]


def _init_worker(counter: Any) -> None:
    global _decisions
    _decisions = counter


def _wait(futures: Sequence[Future[Any]], counter: Any, progress: bool) -> None:
    columns = (TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}  {task.fields[decisions]}"),
               TimeElapsedColumn())
    with Progress(*columns, disable=not progress, transient=True) as bar:
        task = bar.add_task(f"{len(futures)} replays", total=len(futures), decisions="")
        while not all(f.done() for f in futures):
            bar.update(task, completed=sum(f.done() for f in futures),
                       decisions=f"{counter.value:,} decisions")
            time.sleep(0.2)
