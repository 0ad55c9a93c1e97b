"""The command line's layout: every command in the registry with its own module, flags and
parser; and the frontier computed once (in ``uvm_sched.sim``) for the table and the figure
(the size rule for the whole package is ``test_code_size.py``).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
COMMANDS = ["demo", "record", "analyze", "plan", "simulate", "compare", "report", "export",
            "sidebyside", "warmup"]

# -- the registry -----------------------------------------------------------------------------
def test_registry_lists_every_command_in_help_order():
    from uvm_sched import cli

    assert list(cli.COMMANDS) == COMMANDS
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == COMMANDS
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert helps == {name: info.summary for name, info in cli.COMMANDS.items()}


@pytest.mark.parametrize("name", COMMANDS)
def test_each_command_module_builds_its_own_parser_and_runs_its_command(name):
    from uvm_sched import cli
    from uvm_sched.cli._args import Parser

    info = cli.COMMANDS[name]
    mod = importlib.import_module(info.module)
    assert info.module.startswith("uvm_sched.cli._"), "command modules are private"
    assert mod.__doc__ and f"uvm-sched {name}" in mod.__doc__
    alone = Parser(prog=f"uvm-sched {name}")
    mod.add_arguments(alone)
    assert alone.format_help()
    assert mod.EXAMPLES.strip().startswith(f"uvm-sched {name}")
    sub = cli.build_parser()._subparsers._group_actions[0].choices[name]
    assert sub.get_default("func") is mod.run
    # the command's own flags are the ones its module declares (plus the shared output ones)
    own = {o for a in alone._actions for o in a.option_strings}
    assert own - {"-h", "--help"} <= {o for a in sub._actions for o in a.option_strings}


def test_the_console_script_and_python_m_reach_the_same_main():
    tomllib = pytest.importorskip("tomllib")
    from uvm_sched import cli

    script = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, func = script["uvm-sched"].split(":")
    assert getattr(importlib.import_module(module), func) is cli.main
    assert importlib.import_module("uvm_sched.__main__").main is cli.main
    assert importlib.import_module("uvm_sched.cli.__main__").main is cli.main


# -- the frontier: one definition ---------------------------------------------------------------
def _frame(rows):
    return pd.DataFrame(rows, columns=["budget_bytes", "budget_pct", "policy", "slowdown"])


def test_frontier_drops_a_budget_that_saves_less_and_runs_slower():
    from uvm_sched.sim import savings_frontier

    df = savings_frontier(_frame([
        (75, 75.0, "demand", 3.0),   # saves 25%, slower than the 50% point: dominated
        (50, 50.0, "demand", 2.0),   # saves 50%, faster
        (30, 30.0, "demand", 4.0),   # saves 70%, slowest but saves most: kept
        (50, 50.0, "demand", 2.0),   # the same budget twice: only one speaks for it
        (30, 30.0, "bound", float("nan")),  # infeasible: never on the frontier
    ]))
    assert list(df["saving"]) == pytest.approx([0.25, 0.5, 0.7, 0.5, 0.7])
    assert list(df["frontier"]) == [False, True, True, False, False]


def test_frontier_needs_the_compare_columns():
    from uvm_sched.sim import savings_frontier

    with pytest.raises(ValueError, match=r"lacks \['budget_pct'\]"):
        savings_frontier(pd.DataFrame({"policy": ["demand"], "slowdown": [1.0]}))


@pytest.fixture()
def tiny_trace(tmp_path) -> Path:
    from _planner_helpers import tiny_trace as write_tiny

    return write_tiny(tmp_path / "tiny.parquet", unit=1 << 20)


def test_compare_prints_and_plots_the_frontier_of_one_function(tiny_trace, tmp_path,
                                                               monkeypatch, capsys):
    """The CLI's table and viz's figure both come from uvm_sched.sim.savings_frontier, and
    they mark the same points."""
    pytest.importorskip("plotly")
    from uvm_sched import cli, sim
    from uvm_sched.viz import _data

    calls = []
    real = sim.savings_frontier

    def spy(df):
        out = real(df)
        calls.append(out)
        return out

    monkeypatch.setattr(sim, "savings_frontier", spy)
    plot = tmp_path / "f.html"
    assert cli.main(["compare", str(tiny_trace), "--budget", "100%,95%,90%", "--policies",
                     "demand,prefetch-on-alloc", "--plot", str(plot), "--json", "-q"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(calls) == 2, "compare computes the frontier once and the plot reads the same"
    printed = {(f["policy"], f["budget_bytes"]) for f in doc["frontier"]}
    assert len(printed) >= 2
    drawn = calls[1]
    assert printed == {(r.policy, int(r.budget_bytes))
                       for r in drawn[drawn["frontier"]].itertuples()}
    assert plot.stat().st_size > 0
    # viz's table is the shared one, with the saving in % for the axis
    table = _data.frontier_table(calls[0])
    assert np.allclose(table["savings_pct"], 100 * table["saving"])
    assert all(math.isclose(f["saving"], 1 - f["budget_bytes"] / doc["peak_bytes"])
               for f in doc["frontier"])


def test_the_frontier_figure_draws_a_dominated_budget_hollow(tmp_path):
    pytest.importorskip("plotly")
    pytest.importorskip("matplotlib")
    from uvm_sched import viz

    cmp = _frame([(75, 75.0, "demand", 3.0), (50, 50.0, "demand", 2.0),
                  (30, 30.0, "demand", 4.0)])
    fig = viz.frontier(cmp)
    demand = next(d for d in fig.data if d.name == "demand")
    assert list(demand.x) == [25, 50, 70]
    assert list(demand.marker.symbol) == ["circle-open", "circle", "circle"]
    assert "hollow" in fig.layout.title.subtitle.text
    mpl = viz.frontier(cmp, backend="matplotlib")
    mpl.savefig(tmp_path / "f.png", dpi=50)
    hollow = [ln for ln in mpl.axes[0].lines if ln.get_markerfacecolor() == "none"]
    assert len(hollow) == 1 and list(hollow[0].get_xdata()) == [25]
