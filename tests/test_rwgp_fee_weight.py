"""``--fee-weight``: λ reaches the RWGP placement through the registry and ``slurm-rl
simulate``, and nothing else pretends to take it."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from slurm_rl.agents.registry import is_learned, make_scheduler, takes_fee_weight
from slurm_rl.agents.rwgp.placement import PlacementConfig, RwgpPlacement
from slurm_rl.cli.main import main


def test_registry_passes_the_fee_weight_to_rwgp_only() -> None:
    default = make_scheduler("fifo+rwgp", {}).placement
    weighted = make_scheduler("fifo+rwgp", {}, fee_weight=0.3).placement
    assert isinstance(default, RwgpPlacement) and isinstance(weighted, RwgpPlacement)
    assert default.config.fee_weight == PlacementConfig().fee_weight
    assert weighted.config.fee_weight == 0.3
    assert make_scheduler("fifo+best-fit", {}, fee_weight=0.3).policy_id == "fifo+best-fit"
    assert takes_fee_weight("qssf+rwgp") and not takes_fee_weight("fifo+fastest-gpu")
    assert is_learned("rl+rwgp") and not takes_fee_weight("rl+rwgp")


def test_simulate_takes_a_fee_weight(tmp_path: Path) -> None:
    header = "job_id,submit_time,num_gpus,duration"
    rows = "".join(f"{i},2017-10-01T00:{i:02d}:00,{1 + i % 2},{600 + 60 * i}\n" for i in range(12))
    trace = tmp_path / "jobs.csv"
    trace.write_text(f"{header}\n{rows}")
    args = ["simulate", "--cluster", "tiny", "--workers", "1", "--trace", str(trace),
            "--policies", "fifo+rwgp,fifo+cheapest-gpu"]
    runner = CliRunner()
    plain = runner.invoke(main, [*args, "--json"])
    assert plain.exit_code == 0, plain.output
    weighted = runner.invoke(main, [*args, "--fee-weight", "5", "--json"])
    assert weighted.exit_code == 0, weighted.output
    fees = [{r["policy"]: r["total_fees"] for r in json.loads(out.output)["results"]}
            for out in (plain, weighted)]
    assert fees[1]["fifo+rwgp"] <= fees[0]["fifo+rwgp"]
    assert fees[1]["fifo+cheapest-gpu"] == fees[0]["fifo+cheapest-gpu"]
    noted = runner.invoke(main, [*args, "--fee-weight", "0.2"])
    assert "λ = 0.2 per $: fifo+rwgp" in noted.output
    refused = runner.invoke(main, [*args, "--fee-weight", "-1"])
    assert refused.exit_code != 0
