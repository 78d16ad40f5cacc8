"""Generated command lines through the real ``slurm-rl simulate`` (click's CliRunner).

Every command line either runs to exit 0, or exits 2 with one error line: click's
``Error: ...`` naming the option, or ours, ``error: ...`` naming the option, file, line or
key. Never a traceback (CliRunner's exit 1 with an exception), never a hang.

Each run replays a three-job trace on the ``tiny`` cluster with one policy in one worker,
so a command line that is valid takes well under a second.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import chdir
from pathlib import Path

from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

from slurm_rl.cli.main import main
from slurm_rl.workloads import SHARED_TRACES, SYNTHETIC
from tests.property._support import NASTY_WORDS, budget, nasty_text, outcome, within

TRACE = "job_id,submit_time,num_gpus,duration\n1,0,1,100\n2,10,2,100\n3,20,8,50\n"
SPEC = ('name = "mine"\ndescription = "d"\n[[node_groups]]\ngpu_type = "T4"\ncount = 2\n'
        'gpus_per_node = 4\nprice_per_gpu_hour = 0.35\nprice_source = "list price"\n')

# What each option may be given besides nasty text ("@x" names a file the test makes).
OPTION_VALUES: dict[str, list[str]] = {
    "--cluster": ["tiny", "venus", "nope", "@spec", "@junk", "@dir", "@fifo", "@missing", ""],
    # no shared trace's name: a valid one replays a real trace for minutes
    "--trace": ["@trace", "@junk", "@dir", "@fifo", "@missing", "@spec", "philly.csv", ""],
    "--format": ["csv", "philly", "swf", "helios", "pai2023", "helios-venus-slice", "nope"],
    "--window": ["0:100", "0..15", "1970-01", "15:0", "0:1e20", "nan:1", "x", "2017-10"],
    "--days": ["1", "0.01", "3650", "3651", "1e20", "-1", "nan"],
    "--warmup-days": ["0", "1", "3650", "1e20", "-1", "inf"],
    "--policies": ["fifo+best-fit", "sjf+first-fit,fifo+random", "fifo+rwgp", "nope",
                   "fifo+nope", ",", "", "fifo+best-fit,fifo+best-fit"],
    "--mode": ["direct", "slurm", "both"],
    "--cycle": ["10", "0", "1e-300", "1e300", "60.5", "-1", "nan"],
    "--checkpointable": ["0", "0.5", "1", "1.5", "-0.1", "nan"],
    "--restart-overhead": ["0", "300", "1e300", "-1", "inf"],
    "--seed": ["0", "7", "-5", "9" * 25, "1.5", "x"],
    "--fee-weight": ["0", "1", "1e300", "-1", "nan"],
    "--report": ["@out", "@trace", "report dir", "a" * 300],
    "--workers": ["1", "2", "0", "-1", "9" * 25],
    "--replicas": ["1", "2", "0", "-1", "x"],
}
FLAGS = ["--no-fluctuation", "--skip-bad-rows", "--json", "--checkpointable", "--help",
         "--bogus", "--version"]


def _files(root: Path) -> dict[str, str]:
    (root / "trace.csv").write_text(TRACE)
    (root / "spec.toml").write_text(SPEC)
    (root / "junk").write_bytes(b"\xff\x00junk\n" * 8)
    (root / "dir").mkdir(exist_ok=True)
    if not (root / "fifo").exists():
        os.mkfifo(root / "fifo")
    names = {"trace": "trace.csv", "spec": "spec.toml", "junk": "junk", "dir": "dir",
             "fifo": "fifo", "missing": "missing.csv", "out": "out"}
    return {f"@{key}": str(root / name) for key, name in names.items()}


def _relative(text: str) -> bool:
    """A --report the command may create: never outside the test's folder (it makes it)."""
    return not text.startswith(("/", "~")) and ".." not in text


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    options = {"--cluster": "tiny", "--trace": "@trace", "--policies": "fifo+best-fit",
               "--workers": "1"}
    for _ in range(draw(st.integers(1, 3))):
        option = draw(st.sampled_from(sorted(OPTION_VALUES)))
        pool = st.sampled_from(OPTION_VALUES[option])
        if option != "--report":
            pool = pool | st.sampled_from(NASTY_WORDS) | nasty_text()
        if option == "--report":
            pool = pool.filter(_relative)
        elif option == "--trace":  # a shared trace or the synthetic one replays for minutes
            pool = pool.filter(lambda name: name not in (*SHARED_TRACES, SYNTHETIC))
        options[option] = draw(pool)
    args = ["simulate"]
    for option, value in options.items():
        args += [option, value]
    args += draw(st.lists(st.sampled_from(FLAGS), max_size=2))
    if draw(st.integers(0, 9)) == 0:  # an option left without its value
        args.append(draw(st.sampled_from(sorted(OPTION_VALUES))))
    return args


def check_run(args: list[str], files: dict[str, str]) -> Result:
    args = [files.get(arg, arg) for arg in args]
    result = within(lambda: CliRunner().invoke(main, args), f"slurm-rl {' '.join(args)}"[:200],
                    seconds=60)
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert result.exit_code in (0, 2), (result.exit_code, output[-2000:])
    if result.exit_code == 0:
        outcome("ran")
        assert output.strip(), "a run that printed nothing"
        return result
    errors = [line for line in output.splitlines() if line.startswith(("Error:", "error:"))]
    assert len(errors) == 1, output[-2000:]
    outcome("click usage error" if errors[0].startswith("Error:") else "our error")
    assert len(errors[0]) > len("error: ") + 3, output
    return result


@budget(150, deadline=None)
@given(args=command_lines())
def test_simulate_command_lines_run_or_fail_in_one_line(tmp_path: Path, args: list[str]) -> None:
    here = Path(tempfile.mkdtemp(dir=tmp_path))  # relative paths (--report) land in here
    with chdir(here):
        check_run(args, _files(here))


def test_the_base_command_line_runs(tmp_path: Path) -> None:
    files = _files(tmp_path)
    args = ["simulate", "--cluster", "@spec", "--trace", "@trace", "--policies",
            "fifo+best-fit", "--workers", "1", "--json"]
    result = check_run(args, files)
    assert result.exit_code == 0 and '"fifo+best-fit"' in result.output
