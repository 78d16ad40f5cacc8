"""Operations: metrics, JSON decision logs, ``show-conf``, ``explain``, ``revert`` and
``selftest`` (docs/operations.md)."""
