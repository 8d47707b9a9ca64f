"""Tables of docs/development.md: the test suite's time budget and its slowest tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .common import md_table, num

TEST_BUDGET_S = 720


def test_durations(d: Mapping[str, Any]) -> str:
    """The slowest tests of one pytest run (``bench/bench_test_durations.py``): seconds, test id, cause."""
    rows = [[num(r["seconds"], "{:.1f}"), f"`{r['id']}`", r["cause"]] for r in d["slowest"]]
    return md_table(["seconds", "test", "what it spends them on"], rows)


def test_durations_totals(d: Mapping[str, Any]) -> str:
    """One sentence: the wall time of a pytest run against the budget, its test counts and the pytest arguments."""
    t, m = d["totals"], d["provenance"]["machine"]
    args = " ".join(d.get("pytest_args") or []) or "(none)"
    note = d["provenance"].get("note")
    verdict = "met" if t["wall_s"] <= TEST_BUDGET_S else "**missed**"
    return (f"pytest wall {t['wall_s']:.0f} s ({t['wall_s'] / 60:.1f} min; budget {TEST_BUDGET_S / 60:.0f} min: "
            f"{verdict}) on {m.get('cores')} cores "
            f"({m.get('cpu_model')}); {t['tests']} tests: {t['passed']} passed, {t['failed']} failed, "
            f"{t['skipped']} skipped; sum of the per-test seconds {t['sum_test_s']:.0f}; extra pytest arguments: "
            f"`{args}`" + (f"; {note}" if note else "") + ".")
