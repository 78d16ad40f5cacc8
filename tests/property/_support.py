"""What the property suites share: example budgets, nasty values, the one-line check."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import currently_in_test_context, event, settings
from hypothesis import strategies as st

from tests.timebox import time_limit

T = TypeVar("T")

# Under SLURM_RL_HYPOTHESIS=explore every suite draws ten times as many examples.
_SCALE = 10 if os.environ.get("SLURM_RL_HYPOTHESIS") == "explore" else 1
# One input, read once, never takes this long: past it the reader hangs.
EXAMPLE_TIME_LIMIT_S = 10.0


def budget(examples: int, **overrides: Any) -> settings:
    """Settings drawing ``examples`` examples (the suites' time budget is set here)."""
    return settings(max_examples=examples * _SCALE, **overrides)


def outcome(name: str) -> None:
    """Count ``name`` in ``--hypothesis-show-statistics`` (refused / read share per suite)."""
    if currently_in_test_context():
        event(name)


def within(call: Callable[[], T], what: str = "one example",
           seconds: float = EXAMPLE_TIME_LIMIT_S) -> T:
    with time_limit(seconds, what):
        return call()


def assert_one_line(message: str, *names: str) -> None:
    """An error a user reads: one line (no line break of any kind) naming where it is."""
    assert message.strip(), "an empty error message"
    assert len(message.splitlines()) == 1, f"not one line: {message!r}"
    for name in names:
        assert name in message, f"{name!r} not named in {message!r}"


# Text a corrupt or hostile file may hold where a number, a time or a name should be.
NASTY_WORDS = [
    "", " ", "nan", "NaN", "-nan", "inf", "-inf", "Infinity", "-1", "0", "-0", "+1", "1.5",
    "1e30", "-1e30", "1e308", "1e309", "-1e309", "1e-320", "9" * 25, "9223372036854775807",
    "9223372036854775808", "-9223372036854775809", "18446744073709551616", "9" * 5000, "0x10",
    "1_000", "٣", "\U0001d7e0", " 5 ", "5\x00", "\x00", "\n", "\r", "\r\n", "\x1c", "\u2028",
    "\x85", "\t", '"', "'", ",", ";", "#", '"unterminated', "a" * 10_000, "é", "\U0001f600",
    "\ufeff", "(null)", "N/A", "None", "true", "2017-10-09 07:01:55", "2017-10-09T07:01:55+14:00",
    "9999-12-31 23:59:59", "0001-01-01 00:00:00", "1969-12-31 23:59:59", "2100-01-01 00:00:00",
    "2017-02-30 00:00:00", "V100", "v100", "A100|T4", "H200", "imagenet", "resnet",
]


def nasty_text() -> st.SearchStrategy[str]:
    numbers = st.one_of(
        st.integers().map(str),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda x: f"{x:g}"),
    )
    return st.one_of(st.sampled_from(NASTY_WORDS), numbers, st.text(max_size=30))
