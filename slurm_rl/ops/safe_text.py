"""Text from the store, from Slurm and from its users, made safe to show: the one place
that decides what a terminal or a spreadsheet gets to see.

A job id, a user, a partition or Slurm's answer is data. Shown raw, a newline forges a line
of our output, an escape sequence rewrites the terminal (or hides a link in it), a bidi
override (U+202E) shows ``exe.sh`` as ``hs.exe``, and a zero-width or tag character hides
text altogether. In a CSV file, a cell that starts like a formula (``=HYPERLINK(...)``)
runs as one when a spreadsheet opens it.

- :func:`terminal_text`: every control, format (bidi included), surrogate and line- or
  paragraph-separator character as a visible escape (``\\x1b``, ``\\u202e``,
  ``\\U000e0041``). Kept: the zero-width joiner and non-joiner, which Persian, Indic
  scripts and emoji need and which cannot reorder or hide text.
- :func:`csv_cell`: that, and a leading ``'`` (OWASP's advice on CSV injection) on a text
  cell that starts with ``=``, ``+``, ``-``, ``@``, a tab, CR, LF or NUL, after spaces.
- :func:`error_line`: an exception (a database driver's, most often) as one such line,
  without the SQL, its parameters or SQLAlchemy's background link.

JSON output needs none of this: ``json.dumps`` escapes every such character itself.
"""

from __future__ import annotations

import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_KEPT = frozenset({"\u200c", "\u200d"})  # zero-width non-joiner and joiner
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r", "\n", "\0")

# What a store's one-line error means to whoever ran the command.
_HINTS = {
    "database is locked": "another process, the daemon or a retrain, is writing to the "
                          "store: try again",
    "readonly database": "the store is read-only to this user, or opened read-only",
    "file is not a database": "not a SQLite store",
    "malformed": "the store file is damaged: restore it from a backup",
    "no such table": "not a slurm-rl store, or one the daemon has not set up",
}


def _escape(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    return unicodedata.category(char) in _UNSAFE_CATEGORIES and char not in _KEPT


def terminal_text(value: object) -> str:
    """``value`` as one line a terminal shows as it is (see the module's docstring)."""
    text = str(value)
    if text.isprintable():  # no control, format or separator character but the space
        return text
    return "".join(_escape(char) if _unsafe(char) else char for char in text)


def csv_cell(value: object) -> object:
    """A CSV cell no spreadsheet runs and no terminal obeys; numbers, None and booleans
    stay as they are (a negative number is no formula)."""
    if not isinstance(value, str):
        return value
    lead = "'" if value.lstrip(" ").startswith(FORMULA_LEADS) else ""
    return lead + terminal_text(value)


def error_line(error: BaseException) -> str:
    """The first line of what went wrong (a DBAPI error's own message when SQLAlchemy
    wrapped one), with what it means for the well-known SQLite states."""
    cause = getattr(error, "orig", None) or error
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    hints = [hint for words, hint in _HINTS.items() if words in first]
    return terminal_text(first + "".join(f" ({hint})" for hint in hints[:1]))
