"""The backfill plan's shortcuts (slurm_rl/simulator/backfill.py) against the slow ways they
replace, on random inputs: the golden schedules prove them on replays, these on the corners
(empty maps, no candidate nodes, one-row windows, per-node needs of a pin)."""

from __future__ import annotations

import numpy as np

from slurm_rl.simulator.backfill import _nodes_lasting


def _by_hand(held: np.ndarray, ends: np.ndarray, least: np.ndarray) -> list[int]:
    rows, columns = held.shape
    return [sum(all(held[r, c] >= least[c] for r in range(k, int(ends[k])))
                for c in range(columns)) for k in range(rows)]


def test_nodes_lasting_counts_the_nodes_free_throughout_each_window() -> None:
    rng = np.random.default_rng(21)
    for _ in range(500):
        rows, columns = int(rng.integers(0, 25)), int(rng.integers(0, 6))
        held = rng.integers(0, 5, size=(rows, columns))
        # a job's windows: each starts at its row, ends after it, and never ends earlier
        # than the window before
        ends = np.maximum.accumulate(np.maximum(rng.integers(0, rows + 1, size=rows),
                                                np.arange(1, rows + 1)))
        if rng.random() < 0.5:  # one need for every node (a share's GPUs)
            share = int(rng.integers(0, 5))
            got = _nodes_lasting(held, ends, share)
            assert got.tolist() == _by_hand(held, ends, np.full(columns, share))
        else:  # one need per node (a pin's GPUs)
            least = rng.integers(0, 5, size=columns)
            got = _nodes_lasting(held, ends, least)
            assert got.tolist() == _by_hand(held, ends, least)
