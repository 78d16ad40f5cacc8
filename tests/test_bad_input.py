"""Bad input outside the trace readers: one clear line naming the option, file or key, and
a non-zero exit — never a traceback, never a silently wrong number. (Traces:
test_trace_errors.py; bundles: test_ordering_agent.py.)"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_rl.cli.main import main
from slurm_rl.config import load_config
from slurm_rl.errors import InputError, UnknownNameError
from tests.timebox import time_limit

HEADER = "job_id,submit_time,num_gpus,duration"


def _run(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(main, list(args))
    assert "Traceback" not in result.output
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


def test_an_unknown_name_crosses_a_process_boundary_whole() -> None:
    """Replays run in worker processes; the error must come back as itself."""
    error = UnknownNameError("GPU type", "H200", ["A100", "V100"])
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, UnknownNameError) and str(back) == str(error)


@pytest.mark.parametrize("args, option", [
    (["simulate", "--cluster", "tiny", "--cycle", "nan"], "--cycle"),
    (["simulate", "--cluster", "tiny", "--restart-overhead", "inf"], "--restart-overhead"),
    (["simulate", "--cluster", "tiny", "--fee-weight", "nan"], "--fee-weight"),
    (["train", "--learning-rate", "nan"], "--learning-rate"),
    (["retrain", "--store", "sqlite://", "--margin", "nan"], "--margin"),
    (["daemon", "--once", "--interval", "inf"], "--interval"),
])
def test_numbers_must_be_finite(args: list[str], option: str) -> None:
    code, lines = _run(*args)
    assert code == 2 and f"Invalid value for '{option}'" in lines[-1]
    assert "is not a finite number" in lines[-1]


@pytest.mark.parametrize("option", ["--days", "--warmup-days"])
def test_days_are_bounded(option: str) -> None:
    """1e20 days is finite, and would generate or replay for ever."""
    code, lines = _run("simulate", "--cluster", "tiny", option, "1e20")
    assert code == 2 and f"Invalid value for '{option}'" in lines[-1]


def test_a_report_directory_that_cannot_be_made_fails_before_the_work(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, lines = _run("simulate", "--cluster", "tiny", "--report", str(blocker / "sub"))
    assert code == 2 and lines[-1].startswith("Error: Invalid value for '--report': cannot create")


@pytest.mark.parametrize("command", [["models", "list"], ["export", "--since", "1d"],
                                     ["retrain"], ["explain", "5"]])
def test_a_store_url_that_is_no_url_is_one_line(command: list[str], tmp_path: Path) -> None:
    extra = ["--output", str(tmp_path / "out")] if command[0] == "export" else []
    code, lines = _run(*command, *extra, "--store", "notaurl")
    assert code == 2 and lines == [
        "error: store URL 'notaurl...': Could not parse SQLAlchemy URL from given URL string; "
        "give a SQLAlchemy URL, e.g. sqlite:////var/lib/slurm-rl/slurm-rl.sqlite or "
        "postgresql+psycopg://user@host/db"]


@pytest.mark.parametrize("command", [["models", "list"], ["retrain"], ["explain", "5"]])
@pytest.mark.parametrize(("url", "module"), [("mysql://u:s3cret@127.0.0.1/db", "MySQLdb"),
                                             ("postgresql+psycopg2://u@h/db", "psycopg2")])
def test_a_store_url_whose_driver_is_not_installed_is_one_line(
        command: list[str], url: str, module: str) -> None:
    """A site with slurmdbd's MariaDB, or a guide's psycopg2 URL: ModuleNotFoundError was a
    traceback in every command that opens the store."""
    code, lines = _run(*command, "--store", url)
    assert code == 2 and len(lines) == 1 and "s3cret" not in lines[0]
    assert f"is not installed ({module}); use one of sqlite:////" in lines[0]


def test_a_store_url_error_never_shows_the_password() -> None:
    code, lines = _run("models", "list", "--store", "postgres://u:s3cret@h/db")
    assert code == 2 and "s3cret" not in lines[-1] and "'postgres://u:***@h/db'" in lines[-1]
    code, lines = _run("models", "list", "--store", "postgresql+psycopg://u:s3cret@h:port/db")
    assert code == 2 and "s3cret" not in lines[-1] and "invalid literal" in lines[-1]


@pytest.mark.parametrize("body, expected", [
    ('[deamon]\nmode = "enforce"\n', "no [daemon] table (found [deamon])"),
    ('mode = "enforce"\n[daemon]\n', "mode: outside any table"),
    ("[daemon]\nprice_per_gpu_hour = { V100 = nan }\n",
     "price_per_gpu_hour: V100: a price must be a number from 0 to 1e+09"),
    ('[daemon]\nstate_dir = ""\n', "state_dir: empty; name a directory"),
    ("[daemon]\nmetrics_port = true\n", "metrics_port: a number, not true"),
    ("[daemon]\ninterval_s = false\n", "interval_s: a number, not false"),
])
def test_config_mistakes_that_would_apply_silently_are_refused(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = tmp_path / "site.toml"
    path.write_text(body)
    with pytest.raises(InputError, match=r"^" + str(path).replace("/", r"\/")) as error:
        load_config(path)
    assert expected in str(error.value)


def test_files_that_are_not_text_are_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "junk.toml"
    junk.write_bytes(b"\xd0\xff\x00\x81" * 64)
    with pytest.raises(InputError, match="junk.toml: not UTF-8 text"):
        load_config(junk)
    code, lines = _run("simulate", "--cluster", str(junk))
    assert code != 0 and lines == [f"error: {junk}: not UTF-8 text (byte 0)"]


@pytest.mark.parametrize("command", [["models", "list"], ["export", "--since", "1d"],
                                     ["retrain"]])
def test_a_store_that_is_not_there_is_named_not_created(
    command: list[str], tmp_path: Path
) -> None:
    missing = tmp_path / "never.sqlite"
    extra = ["--output", str(tmp_path / "out")] if command[0] == "export" else []
    code, lines = _run(*command, *extra, "--store", f"sqlite:///{missing}")
    assert code == 2 and lines == [f"error: no store at sqlite:///{missing} (has the daemon "
                                   "run with this config?)"]
    assert not missing.exists()


def test_retrain_checks_its_arguments_before_the_store(tmp_path: Path) -> None:
    """An empty store would otherwise answer "retrain skipped" and hide the bad argument."""
    url = f"sqlite:///{tmp_path / 'empty.sqlite'}"
    (tmp_path / "not-a-bundle").mkdir()
    code, lines = _run("retrain", "--store", url, "--candidate", str(tmp_path / "not-a-bundle"))
    assert code == 2 and lines[-1].startswith("error: --candidate: no policy bundle at")
    code, lines = _run("retrain", "--store", url, "--policy", "bogus+x")
    assert code == 2 and lines[-1].startswith("error: --policy bogus+x: unknown ordering policy")


def test_jobs_that_never_fit_the_cluster_are_counted_in_the_title(tmp_path: Path) -> None:
    trace = tmp_path / "big.csv"
    trace.write_text(f"{HEADER}\n1,2017-10-01T00:00:00,1,100\n2,2017-10-01T00:00:10,999,100\n")
    code, lines = _run("simulate", "--cluster", "tiny", "--workers", "1", "--trace", str(trace),
                       "--policies", "fifo+best-fit")
    assert code == 0
    assert "big on tiny: 1 jobs (1 more can never fit tiny and are left out)" in lines[0]


@pytest.mark.parametrize("command", [["simulate", "--cluster", "tiny"], ["evaluate"]])
def test_a_fifo_as_trace_is_one_line_not_a_hang(command: list[str], tmp_path: Path) -> None:
    fifo = tmp_path / "trace.csv"
    os.mkfifo(fifo)
    with time_limit(60, f"slurm-rl {command[0]} --trace FIFO"):
        code, lines = _run(*command, "--trace", str(fifo), "--report", str(tmp_path / "r"))
    assert code == 2 and lines == [f"error: {fifo}: not a regular file (a FIFO)"]


def test_a_fifo_as_cluster_spec_is_one_line_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "cluster.toml"
    os.mkfifo(fifo)
    with time_limit(60, "slurm-rl simulate --cluster FIFO"):
        code, lines = _run("simulate", "--cluster", str(fifo))
    assert code == 2 and lines == [f"error: {fifo}: not a regular file (a FIFO)"]


def test_a_gpu_count_past_int64_is_one_line(tmp_path: Path) -> None:
    """It reached the replay, which raised OverflowError making the job's node shape."""
    trace = tmp_path / "big.csv"
    trace.write_text(f"{HEADER}\n1,2017-10-01T00:00:00,1,100\n2,2017-10-01T00:00:10,1e30,100\n")
    code, lines = _run("simulate", "--cluster", "tiny", "--workers", "1", "--trace", str(trace),
                       "--policies", "fifo+best-fit")
    assert code == 2 and lines == [f"error: {trace}:3: column 'num_gpus': GPU count 1e30 is more "
                                   "than 1000000, the most GPUs a job may ask for"]


def test_a_trace_no_job_of_which_fits_is_one_line(tmp_path: Path) -> None:
    """Every job left out as never fitting: the replay measured nothing (ValueError)."""
    trace = tmp_path / "big.csv"
    trace.write_text(f"{HEADER}\n1,2017-10-01T00:00:00,999,100\n")
    code, lines = _run("simulate", "--cluster", "tiny", "--workers", "1", "--trace", str(trace),
                       "--policies", "fifo+best-fit")
    assert code == 2 and lines == ["error: no job of trace 'big' can ever fit cluster 'tiny' "
                                   "(1 jobs, none fits); nothing to replay"]


def test_a_negative_seed_is_one_line() -> None:
    """numpy's generators take no negative seed: the synthetic trace raised ValueError."""
    code, lines = _run("simulate", "--cluster", "tiny", "--days", "0.01", "--seed", "-5")
    assert code == 2 and lines == ["error: --seed must be 0 or more, got -5"]


def test_replicas_are_bounded(tmp_path: Path) -> None:
    """--replicas 1e25 built a list of 1e25 scenarios: MemoryError, or a hang."""
    trace = tmp_path / "t.csv"
    trace.write_text(f"{HEADER}\n1,0,1,100\n")
    with time_limit(60, "slurm-rl simulate --replicas 1e25"):
        code, lines = _run("simulate", "--cluster", "tiny", "--trace", str(trace),
                           "--replicas", "9" * 25)
    assert code == 2 and lines == [f"error: --replicas must be at most 100, got {'9' * 25}"]


@pytest.mark.parametrize("option", ["--cluster", "--trace"])
@pytest.mark.parametrize("suffix", ["", ".toml"])
def test_a_name_too_long_for_the_file_system_is_one_line(option: str, suffix: str) -> None:
    """Path.exists() and is_file() raise OSError (ENAMETOOLONG) instead of answering."""
    name = "9" * 300 + suffix
    code, lines = _run("simulate", "--cluster", "tiny", option, name)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ")
    assert ("unknown cluster spec" in lines[0] if option == "--cluster" and not suffix
            else "File name too long" in lines[0]), lines[0]
