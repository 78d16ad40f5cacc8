"""Issue 18 (9): daemon settings that were accepted and broke later — infinite or huge
numbers, a priority floor past Slurm's 32-bit priorities, a newline that became an extra line
of the plugin's config — are one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from slurm_rl.config import DaemonConfig, load_config
from slurm_rl.errors import InputError


@pytest.mark.parametrize("key, value, expected", [
    ("interval_s", "inf", "less than or equal to 3600"),
    ("slurm_timeout_s", "1e300", "less than or equal to 3600"),
    ("defer_window_s", "1000000000000", "less than or equal to 3600"),
    ("defer_extension_s", "inf", "less than or equal to 3600"),
    ("defer_cap_s", "1e20", "less than or equal to 2592000"),
    ("dispatch", "true\nmode = \"advise\"", "needs mode enforce"),
    ("heartbeat_max_age_s", "99999999999", "less than or equal to 86400"),
    ("retention_days", "inf", "less than or equal to 36500"),
    ("retrain_every_h", "1e300", "less than or equal to 87600"),
    ("retrain_timeout_s", "inf", "less than or equal to 604800"),
    ("history_days", "nan", "less than or equal to 3650"),
    ("priority_floor", "4294967296", "less than or equal to 1073741824"),
    ("seed", "-1", "greater than or equal to 0"),
    ("partitions", '["gpu\\nheartbeat_path = \\"/tmp/x\\""]', "holds a control character"),
    ("partitions", '["gpu,cpu"]', "is not a partition name"),
    ("heartbeat_path", '"/run/slurm-rl/beat\\nheartbeat_max_age = 1"',
     "holds a control character"),
    ("cluster_name", '"a\\u001b[2Jb"', "holds a control character"),
])
def test_a_value_that_would_break_later_is_one_line(
    tmp_path: Path, key: str, value: str, expected: str
) -> None:
    path = tmp_path / "site.toml"
    path.write_text(f"[daemon]\n{key} = {value}\n")
    with pytest.raises(InputError) as error:
        load_config(path)
    text = str(error.value)
    assert text.startswith(f"{path}: [daemon] {key}") and expected in text, text
    assert "\n" not in text



def test_a_fifo_or_deep_nesting_as_the_config_is_one_line(tmp_path: Path) -> None:
    """Issue 18 (11): a FIFO given as --config hung; deeply nested TOML raised RecursionError."""
    import os

    fifo = tmp_path / "site.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file \\(a FIFO\\)"):
        load_config(fifo)
    deep = tmp_path / "deep.toml"
    deep.write_text("[daemon]\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(InputError, match="nested too deeply"):
        load_config(deep)
    huge = tmp_path / "huge.toml"
    huge.write_text("[daemon]\nseed = " + "9" * 5000 + "\n")
    with pytest.raises(InputError, match="not valid TOML"):
        load_config(huge)


def test_retention_must_keep_what_a_retrain_and_history_priming_read() -> None:
    """A retrain reads the jobs that ended in its window with their decisions (older by the
    jobs' wait and run); deleted rows would silently drop those jobs from what is learned."""
    with pytest.raises(ValidationError, match=r"retention_days \(7\) must be at least 14"):
        DaemonConfig(retention_days=7, retrain_every_h=24)
    with pytest.raises(ValidationError, match=r"retention_days \(5\) must be at least 7"):
        DaemonConfig(retention_days=5)  # history_days 7
    assert DaemonConfig(retention_days=14, retrain_every_h=24).retention_days == 14
    assert DaemonConfig(retention_days=0, retrain_every_h=24, history_days=0).retention_days == 0
