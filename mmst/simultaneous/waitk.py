"""Wait-k lagging values: the one parser of ``k`` lists, for training, evaluation, the agent and recipes.

A wait-k value is ``k >= 1`` (read ``k`` pre-decision chunks before the first write) or ``None``
(offline: the whole input, full attention). Configs, command lines and recipes spell the same list
the same ways: ``3``, ``"1,3,5"``, ``[1, 3, "offline"]``; ``offline``, ``none``, ``inf`` and YAML
``null`` all mean ``None``.
"""

from __future__ import annotations

from typing import Any

WaitK = int | None
"""One wait-k value: ``k >= 1`` chunks, or ``None`` for offline."""

_OFFLINE = ("offline", "none", "inf", "null")


def _one(v: Any, name: str) -> WaitK:
    if v is None:
        return None
    if isinstance(v, str):
        s = v.strip().lower()
        if s in _OFFLINE:
            return None
        try:
            v = int(s)
        except ValueError:
            raise ValueError(f"{name}: each value must be an int >= 1 or 'offline', got {v!r}") from None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{name}: each value must be an int >= 1 or 'offline', got {v!r}")
    return int(v)


def parse_waitk_list(value: Any, name: str = "waitk_lagging") -> list[WaitK]:
    """Parse a wait-k spec into a list of ``int >= 1`` or ``None`` (offline), order and repeats kept.

    Args:
        value: ``None``, an int, a string (one value or comma-separated values), or a list of those.
        name: the option or config key, for the error message.

    Returns:
        ``list[int | None]``, never empty.

    Raises:
        ValueError: an empty spec, or a value that is not an int >= 1 / ``offline`` (``0``, ``-1``,
            ``"fast"``, ``True``); the message names ``name`` and the value.
    """
    if isinstance(value, str):
        items: list[Any] = [p for p in value.split(",") if p.strip()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if not items:
        raise ValueError(f"{name}: empty list (use null or 'offline' for full attention)")
    return [_one(v, name) for v in items]


def parse_waitk(value: Any, name: str = "--waitk-lagging") -> WaitK:
    """Parse exactly one wait-k value (an ``argparse`` ``type`` for single-k options).

    Raises:
        ValueError: not exactly one value, or an invalid one (see :func:`parse_waitk_list`).
    """
    ks = parse_waitk_list(value, name)
    if len(ks) != 1:
        raise ValueError(f"{name}: expected one wait-k value, got {len(ks)}: {value!r}")
    return ks[0]
