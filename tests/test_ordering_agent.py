"""The learned agents under the project's scheduler, masking, messages and policy bundles."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from slurm_rl.agents.dual.agent import (
    OrderingAgent,
    build_scheduler,
    masked_scores,
    network_config,
    registry_scheduler,
)
from slurm_rl.agents.dual.bundle import Bundle, BundleError, load_bundle, save_bundle
from slurm_rl.agents.dual.candidates import CANDIDATE_FEATURES
from slurm_rl.agents.dual.messages import MESSAGE_FEATURES
from slurm_rl.agents.dual.network import DualNetwork
from slurm_rl.agents.dual.placement import LearnedPlacement
from slurm_rl.agents.names import parse
from slurm_rl.agents.starvation import promote_starved
from slurm_rl.core import ClusterSnapshot, Job
from slurm_rl.errors import UnknownNameError
from slurm_rl.loop import run_loop
from slurm_rl.simulator.world import SimActuator, TraceSource
from tests.sim_doubles import job, simulation, small_cluster

SPEED = {"A100": 2.0, "V100": 1.0}


def bundle(chooser: str = "best-fit", seed: int = 0) -> Bundle:
    torch.manual_seed(seed)
    return Bundle(Path("-"), DualNetwork(network_config(16)).eval(),
                  {"chooser": chooser, "fee_weight": 0.1})


def queue_snapshot(free: tuple[int, ...] = (8, 0, 4, 0)) -> ClusterSnapshot:
    pending = (Job("big", 0.0, 16), Job("small", 5.0, 2), Job("typed", 6.0, 4, gpu_type="V100"),
               Job("mid", 7.0, 8))
    return ClusterSnapshot(100.0, small_cluster(), free, pending)


def test_jobs_that_cannot_start_rank_after_every_job_that_can() -> None:
    scheduler = build_scheduler(bundle(), SPEED)
    view = queue_snapshot()
    scheduler.ordering.observe(view)
    scheduler.placement.observe(view)
    scores = np.asarray(scheduler.ordering.score(view))
    can = {"small", "typed", "mid"}  # 16 GPUs fit nowhere with 12 free
    ids = [j.job_id for j in view.pending]
    worst_startable = min(s for i, s in zip(ids, scores, strict=True) if i in can)
    assert scores[ids.index("big")] < worst_startable


def test_jobs_pending_past_the_guard_go_first_longest_waiting_first() -> None:
    scores = np.array([5.0, 1.0, -2.0, 3.0])
    waits = np.array([10.0, 30.0, 90.0, 0.0])
    promoted = promote_starved(scores, waits, 30.0)
    assert list(np.argsort(-promoted)) == [2, 1, 0, 3]  # 90 s, 30 s, then the network's order
    assert promote_starved(scores, waits, None) is scores
    assert promote_starved(scores, np.zeros(4), 30.0) is scores


def test_the_dual_agent_promotes_a_starved_job_that_cannot_start() -> None:
    def ranked_first(starvation_h: float) -> str:
        b = Bundle(Path("-"), bundle().network, {"chooser": "best-fit", "fee_weight": 0.1,
                                                 "starvation_h": starvation_h})
        return build_scheduler(b, SPEED).decide(view).ranking[0]

    view = queue_snapshot()
    view = ClusterSnapshot(25 * 3600.0, view.cluster, view.free_gpus, view.pending)
    assert ranked_first(0.0) != "big"  # it cannot start: masked below the rest
    assert ranked_first(24.0) == "big"  # pending 25 h: first, so backfill reserves for it


def test_masked_scores_keep_the_order_inside_each_group() -> None:
    raw = np.array([5.0, -1.0, 3.0, 9.0])
    valid = np.array([False, True, True, False])
    out = masked_scores(raw, valid)
    assert list(np.argsort(-out)) == [2, 1, 3, 0]


def test_messages_mark_what_can_start_and_say_nothing_about_the_rest() -> None:
    scheduler = build_scheduler(bundle(), SPEED)
    agent = scheduler.ordering
    assert isinstance(agent, OrderingAgent)
    view = queue_snapshot()
    observation = agent.observation(view)
    assert observation.messages.shape == (4, len(MESSAGE_FEATURES))
    assert observation.valid.tolist() == [False, True, True, True]
    assert not observation.messages[0].any()
    typed_options = observation.messages[2, MESSAGE_FEATURES.index("log_options")]
    assert typed_options == pytest.approx(np.log1p(1))  # only the V100 node set


def test_learned_placement_offers_one_candidate_per_gpu_type() -> None:
    scheduler = build_scheduler(bundle(), SPEED)
    placement = scheduler.placement
    assert isinstance(placement, LearnedPlacement)
    view = queue_snapshot(free=(8, 8, 4, 4))
    found = placement.generator.candidates(Job("x", 0.0, 4), view.free_gpus, view)
    types = {view.cluster.nodes[view.cluster.index(p.nodes[0])].gpu_type for p in found.placements}
    assert types == {"A100", "V100"}
    chosen = placement.place(Job("x", 0.0, 4), view.free_gpus, view)
    assert chosen in found.placements
    pace = found.features[:, CANDIDATE_FEATURES.index("pace")]
    np.testing.assert_allclose(found.log_cost, -np.log(pace))  # best-fit knows no cost


def test_with_the_rwgp_chooser_the_log_cost_is_its_score_which_prices_fees() -> None:
    placement = build_scheduler(bundle("rwgp"), SPEED).placement
    assert isinstance(placement, LearnedPlacement)
    view = queue_snapshot(free=(8, 8, 4, 4))
    placement.observe(view)
    found = placement.generator.candidates(Job("x", 0.0, 4), view.free_gpus, view)
    chooser = placement.generator.chooser
    for p, log_cost in zip(found.placements, found.log_cost, strict=True):
        scores = [c.score for c in chooser.candidates(Job("x", 0.0, 4), view.free_gpus, view)
                  if c.placement == p]
        assert log_cost == pytest.approx(np.log(min(scores)))


@pytest.mark.parametrize("variant", ["dual", "ordering-only", "placement-only", "no-communication"])
@pytest.mark.parametrize("mode", ["direct", "slurm"])
def test_every_variant_runs_every_job_in_both_modes(variant: str, mode: str) -> None:
    rng = np.random.default_rng(4)
    jobs = [job(f"j{i}", float(rng.uniform(0, 5000)), int(rng.choice([1, 2, 4, 8])),
                float(rng.lognormal(6, 1)), partition=f"vc{i % 2}") for i in range(40)]
    sim = simulation(jobs, mode=mode, cycle_s=10.0)
    run_loop(TraceSource(sim), build_scheduler(bundle(), SPEED, variant=variant),  # type: ignore[arg-type]
             SimActuator(sim))
    assert sorted(o.job.job_id for o in sim.outcomes) == sorted(j.job_id for j in jobs)
    assert sim.rejected_actions == 0


def test_bundle_round_trip_keeps_the_scores(tmp_path: Path) -> None:
    original = bundle(seed=3)
    save_bundle(tmp_path / "b", original.network, {"fee_weight": 0.25, "chooser": "best-fit"})
    loaded = load_bundle(tmp_path / "b")
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    assert meta["feature_schema"]["version"] == loaded.meta["feature_schema"]["version"]
    assert meta["package_version"] and loaded.fee_weight == 0.25
    view = queue_snapshot()
    scores = []
    for b in (original, loaded):
        scheduler = build_scheduler(b, SPEED)
        scheduler.ordering.observe(view)
        scheduler.placement.observe(view)
        scores.append(np.asarray(scheduler.ordering.score(view)))
    np.testing.assert_allclose(scores[0], scores[1])


def _rewrite(path: Path, change: dict[str, object]) -> None:
    meta = json.loads((path / "meta.json").read_text())
    meta.update(change)
    (path / "meta.json").write_text(json.dumps(meta))


def test_a_bundle_of_another_feature_schema_is_refused_with_one_line(tmp_path: Path) -> None:
    save_bundle(tmp_path / "b", bundle().network, {})
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    _rewrite(tmp_path / "b", {"feature_schema": {**meta["feature_schema"], "version": 0}})
    with pytest.raises(BundleError) as error:
        load_bundle(tmp_path / "b")
    assert "schema v0" in str(error.value) and "\n" not in str(error.value)
    renamed = {**meta["feature_schema"], "job": ["something", *meta["feature_schema"]["job"][1:]]}
    _rewrite(tmp_path / "b", {"feature_schema": renamed})
    with pytest.raises(BundleError, match="feature names differ"):
        load_bundle(tmp_path / "b")


def test_a_bundle_from_before_the_pace_prior_loads_without_it(tmp_path: Path) -> None:
    save_bundle(tmp_path / "b", bundle().network, {})
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    old_network = {k: v for k, v in meta["network"].items() if k != "pace_sharpness"}
    _rewrite(tmp_path / "b", {"network": old_network})  # as written before session 14
    assert load_bundle(tmp_path / "b").network.config.pace_sharpness == 0.0
    assert load_bundle(tmp_path / "b").chooser == "rwgp"  # and it never excluded
    prior = DualNetwork(network_config(16, pace_sharpness=4.0))
    save_bundle(tmp_path / "p", prior, {"chooser": "rwgp-excluding"})
    loaded = load_bundle(tmp_path / "p")
    assert loaded.network.config.pace_sharpness == 4.0 and loaded.chooser == "rwgp-excluding"


def test_missing_or_broken_bundles_are_refused(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="no policy bundle"):
        load_bundle(tmp_path / "nothing")
    save_bundle(tmp_path / "b", bundle().network, {})
    (tmp_path / "b" / "weights.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(BundleError, match="weights.pt is not a weights file slurm-rl wrote"):
        load_bundle(tmp_path / "b")


@pytest.mark.parametrize("setting, why", [
    ({"fee_weight": "abc"}, "'fee_weight' must be a finite number >= 0, not 'abc'"),
    ({"fee_weight": -5}, "'fee_weight' must be a finite number >= 0, not -5"),
    ({"starvation_h": True}, "'starvation_h' must be a finite number >= 0, not True"),
    ({"communicate": "false"}, "'communicate' must be true or false, not 'false'"),
    ({"chooser": "nope"}, "'chooser' 'nope' is not one of"),
    ({"network": [1, 2]}, "'network' must be a table"),
    ({"network": {"hidden": 64, "unknown": 1.0}},
     "'network' does not describe a network this release builds"),
])
def test_a_bundle_with_a_bad_setting_is_refused_naming_it(
    tmp_path: Path, setting: dict[str, object], why: str
) -> None:
    path = save_bundle(tmp_path / "b", bundle().network, {})
    meta = json.loads((path / "meta.json").read_text())
    (path / "meta.json").write_text(json.dumps({**meta, **setting}))
    with pytest.raises(BundleError, match=re.escape(f"{path}: meta.json {why}")):
        load_bundle(path)


@pytest.mark.parametrize("key, value, why", [
    ("pace_sharpness", float("nan"), "network 'pace_sharpness' must be a finite number"),
    ("pace_sharpness", 1e300, "network 'pace_sharpness' must be from 0 to 100"),
    ("hidden", 2**40, "network 'hidden' must be a whole number from 1 to 4096"),
    ("hidden", 64.5, "network 'hidden' must be a whole number from 1 to 4096"),
    ("job_features", True, "network 'job_features' must be a finite number"),
])
def test_a_bundle_with_a_bad_network_setting_is_refused_naming_it(
    tmp_path: Path, key: str, value: object, why: str
) -> None:
    """Issue 18 (6): a NaN network setting was accepted and silently changed the schedule."""
    path = save_bundle(tmp_path / "b", bundle().network, {})
    meta = json.loads((path / "meta.json").read_text())
    meta["network"][key] = value
    (path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(BundleError, match=re.escape(f"{path}: meta.json {why}")):
        load_bundle(path)


@pytest.mark.parametrize("content", [
    "a text file, not a checkpoint\n",  # torch's unpickler: IndexError
    "G",  # struct.error
    "PK\x03\x04 text that starts like a zip\n",
    "",
])
def test_a_weights_file_that_is_no_checkpoint_is_one_line(tmp_path: Path, content: str) -> None:
    path = save_bundle(tmp_path / "b", bundle().network, {})
    (path / "weights.pt").write_text(content)
    with pytest.raises(BundleError, match="weights.pt is not a weights file slurm-rl wrote"):
        load_bundle(path)


def test_nan_weights_are_refused(tmp_path: Path) -> None:
    import torch

    network = bundle().network
    path = save_bundle(tmp_path / "b", network, {})
    state = network.state_dict()
    first = next(iter(state))
    state[first] = torch.full_like(state[first], float("nan"))
    torch.save(state, path / "weights.pt")
    with pytest.raises(BundleError, match=f"'{re.escape(first)}' holds NaN"):
        load_bundle(path)


def test_registry_names_compose_the_variants(tmp_path: Path) -> None:
    save_bundle(tmp_path / "b", bundle().network, {"chooser": "best-fit"})
    ids = {name: registry_scheduler(name, SPEED, bundle_path=tmp_path / "b").policy_id
           for name in ("rl+rl", "rl-nocomm+rl", "rl+best-fit", "fifo+rl")}
    assert ids == {"rl+rl": "rl+rl-best-fit", "rl-nocomm+rl": "rl-nocomm+rl-best-fit",
                   "rl+best-fit": "rl+best-fit", "fifo+rl": "fifo+rl-best-fit"}
    with pytest.raises(UnknownNameError):
        registry_scheduler("rl+nowhere", SPEED, bundle_path=tmp_path / "b")


def test_a_new_bundle_with_the_ordering_prior_ranks_as_sjf_limit_aged(tmp_path: Path) -> None:
    torch.manual_seed(0)
    network = DualNetwork(network_config(16, ordering_sharpness=8.0)).eval()
    save_bundle(tmp_path / "b", network, {"chooser": "best-fit", "fee_weight": 0.1})
    loaded = load_bundle(tmp_path / "b")
    assert loaded.network.config.ordering_sharpness == 8.0
    pending = (Job("long", 0.0, 2, time_limit=8 * 3600.0), Job("short", 5.0, 4, time_limit=3600.0),
               Job("none", 6.0, 1), Job("mid", 7.0, 2, time_limit=4 * 3600.0),
               Job("short2", 8.0, 2, time_limit=3600.0))
    for now, first in ((100.0, "short"), (200 * 3600.0, "long")):  # "long": past the guard
        view = ClusterSnapshot(now, small_cluster(), (8, 0, 4, 0), pending)
        heuristic = parse("sjf-limit-aged+best-fit").ordering.make()
        heuristic.observe(view)
        expected = np.argsort(-np.asarray(heuristic.score(view)), kind="stable")
        scheduler = build_scheduler(loaded, SPEED)
        scheduler.ordering.observe(view)
        scheduler.placement.observe(view)
        ranked = np.argsort(-np.asarray(scheduler.ordering.score(view)), kind="stable")
        assert ranked.tolist() == expected.tolist()
        assert pending[ranked[0]].job_id == first


def test_a_bundle_from_before_the_ordering_prior_loads_without_it(tmp_path: Path) -> None:
    save_bundle(tmp_path / "b", bundle().network, {})
    meta = json.loads((tmp_path / "b" / "meta.json").read_text())
    _rewrite(tmp_path / "b", {"network": {k: v for k, v in meta["network"].items()
                                          if k != "ordering_sharpness"}})
    assert load_bundle(tmp_path / "b").network.config.ordering_sharpness == 0.0
