"""Advance reservations (slurm_rl/slurm/reservations.py) on the recorded 22.05.8 output of
``scontrol show reservation -o`` (``record_22_05.py --waiting``): an active reservation of
a100-03 for alice and a maintenance window of v100-[01-02] a day later."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_rl.slurm.client import CliSlurmClient
from slurm_rl.slurm.errors import SlurmOutputError
from slurm_rl.slurm.reservations import parse_reservations, reserved_nodes
from slurm_rl.slurm.scontrol import parse_local_time
from slurm_rl.slurm.source import SlurmSource
from slurm_rl.slurm.waiting import waits_on
from tests.slurm.fakes import NO_RESERVATIONS, RESERVATIONS, fixture_text, recorded_cluster

RECORDED = fixture_text("22.05", "reservations.txt")
NOW = parse_local_time("2026-11-30T06:20:00")
assert NOW is not None


def test_the_recorded_reservations() -> None:
    active, later = parse_reservations(RECORDED)
    assert (active.name, active.nodes, active.state) == ("now", ("a100-03",), "ACTIVE")
    assert (later.name, later.nodes, later.state) == ("later", ("v100-01", "v100-02"),
                                                      "INACTIVE")
    assert later.flags == ("MAINT", "SPEC_NODES")
    assert reserved_nodes([active, later], NOW) == {"a100-03"}
    assert later.start_time is not None and later.active(later.start_time)  # its window
    assert parse_reservations(NO_RESERVATIONS) == []


def test_a_bad_node_list_names_the_field() -> None:
    with pytest.raises(SlurmOutputError, match="column 'Nodes'"):
        parse_reservations("ReservationName=x Nodes=a100-[01 State=ACTIVE\n")


def test_the_snapshot_offers_no_gpu_of_a_reserved_node() -> None:
    runner = recorded_cluster("22.05")
    plain = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: NOW).snapshot()
    runner.answer(RESERVATIONS, RECORDED)
    source = SlurmSource(CliSlurmClient(runner=runner), clock=lambda: NOW)
    snapshot = source.snapshot()
    index = snapshot.cluster.index
    assert plain.free_gpus[index("a100-03")] == 8 and snapshot.free_gpus[index("a100-03")] == 0
    for node in ("a100-01", "v100-01", "v100-02"):  # not reserved now
        assert snapshot.free_gpus[index(node)] == plain.free_gpus[index(node)]
    assert source.last_state is not None and len(source.last_state.reservations) == 2


def test_a_job_that_asks_for_a_reservation_is_left_to_slurm() -> None:
    source = SlurmSource(CliSlurmClient(runner=recorded_cluster("22.05")), clock=lambda: NOW)
    source.state()
    assert source.last_state is not None
    job = next(j for j in source.last_state.managed.values() if j.is_pending)
    assert waits_on(job, NOW) is None
    assert waits_on(dataclasses.replace(job, reservation="now"), NOW) == "reservation"
