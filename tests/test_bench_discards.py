"""benchmarks/bench_discards.py: the rules it replays over the views' figures, and a row
it measures on a generated case."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_discards as bd  # noqa: E402


def _row(views, with_s, without_s, demand_s=1.0, host_s=0.1):
    return {"case": "x-s1", "hw": "h200-pcie5", "budget_pct": 90, "chosen": "advice-only",
            "discards": "kept: 1 discards", "views": views, "with_s": with_s,
            "without_s": without_s, "demand_s": demand_s, "host_calls_s": host_s}


def test_each_rule_keeps_the_discards_by_its_own_views():
    # views: [no plan s, its stall s, with s, without s]; the events alone (view 0) stall
    # nothing and show the discards costing, the kept reads (view 1) show them paying, the
    # reverse order (view 3) shows them costing
    row = _row([[1.0, 0.0, 1.5, 1.0], [2.0, 1.0, 1.6, 1.9], [2.0, 1.0, 1.6, 1.9],
                [1.2, 0.2, 1.5, 1.2]], with_s=1.2, without_s=0.99)
    rules = bd._rules()
    assert rules["any view (today's)"](row)  # view 1 shows them paying
    assert not rules["worst view"](row)  # 1.5 against 1.0 (view 0)
    assert not rules["worst view where no plan stalls"](row)  # 1.25 against 1.0 (view 3)
    assert not rules["worst view with kept reads"](row)
    assert not rules["never"](row) and not rules["truth (not knowable)"](row)


def test_the_report_counts_losers_and_wrong_keeps_per_rule():
    loses = _row([[1.0, 0.0, 1.5, 1.0], [2.0, 1.0, 1.6, 1.9], None, [1.2, 0.2, 1.5, 1.2]],
                 with_s=1.2, without_s=0.99, host_s=1.5)
    wins = _row([[1.0, 0.0, 1.5, 1.0], [2.0, 1.0, 0.8, 1.9], None, [1.2, 0.2, 1.0, 1.1]],
                with_s=0.5, without_s=0.9)
    text = bd.report([loses, wins, {"case": "y-s2", "hw": "h200-pcie5", "budget_pct": 75,
                                    "chosen": "plan", "discards": None}])
    table = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:]
             for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    assert table["any view (today's)"][0] == "1" and table["any view (today's)"][2] == "1 |"
    assert table["never"][0] == "0" and table["never"][2] == "1 |"  # drops the winner's
    assert table["truth (not knowable)"][0] == "0"
    assert "3 rows planned" in text and "2 with its discards kept" in text
    assert "longer than the faster of the two's simulated iteration" in text
    assert ": 1 of 2; of the rule's losers: 1." in text
    assert "v2 -" in text  # a view that could not hold the budget


def test_a_measured_row_has_the_figures_the_rules_read():
    # gru-s184 on gh200-c2c at 90% of peak: the advice goes out with its discards
    (row,) = bd.measure("gru-s184", [("gh200-c2c", 90)])
    assert row["chosen"] == "advice-only" and row["discards"].startswith("kept"), row
    assert row["n_discards"] > 0 and len(row["views"]) == 4
    for v in row["views"]:
        assert v is None or (len(v) == 4 and v[0] > 0 and 0 <= v[1] <= v[0] + 1e-9)
    assert row["with_s"] > 0 and row["without_s"] > 0 and row["demand_s"] > 0
    assert row["host_calls_s"] > 0
