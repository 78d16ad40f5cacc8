"""The policy-name table (slurm_rl/agents/names.py): one parse, and every list of names read
from it, with the same names, order and meanings as before the table existed."""

from __future__ import annotations

import pytest

from slurm_rl.agents import names
from slurm_rl.agents.registry import baseline_names, is_learned, make_scheduler, takes_fee_weight
from slurm_rl.errors import SlurmRLError, UnknownNameError
from slurm_rl.live_policy import check_name
from slurm_rl.training.evaluate import PLACEMENTS, evaluation_specs

SPEED = {"A100": 2.0, "V100": 1.0}


def test_a_name_parses_into_its_two_entries() -> None:
    policy = names.parse("qssf+rwgp")
    assert (policy.ordering.name, policy.placement.name, str(policy)) == ("qssf", "rwgp",
                                                                          "qssf+rwgp")
    assert policy.takes_fee_weight and not policy.learned


@pytest.mark.parametrize("name, learned, fee", [
    ("fifo+first-fit", False, False), ("fifo+rwgp", False, True), ("rl+rl", True, False),
    ("rl-nocomm+rl", True, False), ("rl+rwgp", True, False), ("qssf+rl", True, False),
    ("sjf-oracle+cheapest-gpu", False, False),
])
def test_learned_and_fee_weight_follow_the_table(name: str, learned: bool, fee: bool) -> None:
    assert (is_learned(name), takes_fee_weight(name)) == (learned, fee)


@pytest.mark.parametrize("name, message", [
    ("fifo", "unknown policy 'fifo'; known: <ordering>+<placement>"),
    ("lifo+first-fit", "unknown ordering policy 'lifo'; known: fifo, multifactor, "
                       "multifactor-aged, qssf, qssf-aged, rl, rl-nocomm, sjf-limit"),
    ("fifo+nope", "unknown placement policy 'nope'; known: best-fit, cheapest-gpu, "
                  "fastest-gpu, first-fit, random, rl, rwgp"),
    ("rl-nocomm+best-fit", "unknown policy 'rl-nocomm+best-fit'; known: rl-nocomm+rl"),
])
def test_unknown_names_say_which_half(name: str, message: str) -> None:
    with pytest.raises(UnknownNameError, match=message.replace("+", r"\+")):
        names.parse(name)


def test_live_names_refuse_the_oracle_ordering() -> None:
    names.parse("sjf-oracle+first-fit")  # a replay's reference
    with pytest.raises(SlurmRLError, match="only a trace has"):
        check_name("sjf-oracle+first-fit")
    with pytest.raises(UnknownNameError) as error:
        check_name("lifo+first-fit")
    assert "sjf-oracle" not in error.value.known


def test_the_lists_of_names_are_the_ones_before_the_table() -> None:
    """Pinned from the hand-written lists the table replaced (registry, evaluate)."""
    assert baseline_names()[:4] == [
        "fifo+first-fit", "sjf-oracle+first-fit", "qssf+first-fit", "multifactor+first-fit"]
    assert baseline_names()[10:14] == [
        "fifo+best-fit", "fifo+random", "fifo+fastest-gpu", "fifo+cheapest-gpu"]
    assert PLACEMENTS == ("first-fit", "best-fit", "random", "fastest-gpu", "cheapest-gpu")
    assert names.realisable_orderings()[:3] == ["fifo", "qssf", "multifactor"]
    assert names.reference_orderings() == ["sjf-oracle"]
    labels = [spec.label for spec in evaluation_specs("bundle", ablations=False)]
    assert labels[:5] == [f"fifo+{p}" for p in PLACEMENTS] and labels[-1] == "dual-agent"
    assert labels[45:50] == [f"sjf-oracle+{p}" for p in PLACEMENTS]


def test_the_stronger_realisable_orderings_are_baselines() -> None:
    """Issue 21: SJF on predicted durations and on time limits, and every realisable ordering
    but FIFO (which the guard leaves as it is) with the age guard, compared everywhere."""
    new = ["sjf-predicted", "sjf-limit", "qssf-aged", "multifactor-aged",
           "sjf-predicted-aged", "sjf-limit-aged"]
    assert names.realisable_orderings()[3:] == new
    labels = {spec.label for spec in evaluation_specs("bundle", ablations=False)}
    assert {f"{o}+{p}" for o in new for p in PLACEMENTS} <= labels
    for ordering in new:
        assert f"{ordering}+first-fit" in baseline_names()
        check_name(f"{ordering}+best-fit")  # a real cluster can run it
        assert ordering in names.names_help(live=True)


def test_every_heuristic_name_builds_the_policy_of_that_name() -> None:
    for ordering in (e for e in names.ORDERINGS.values() if not e.learned):
        for placement in (e for e in names.PLACEMENTS.values() if not e.learned):
            name = names.policy_name(ordering.name, placement.name)
            assert make_scheduler(name, SPEED).policy_id == name


def test_learned_halves_come_only_from_a_bundle() -> None:
    with pytest.raises(SlurmRLError, match="comes from a bundle"):
        names.ORDERINGS["rl"].make()
    assert names.ordering_of("dual-agent") is None
    assert names.ordering_of("qssf+rl") == "qssf"
