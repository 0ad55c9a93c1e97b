"""The README's advisor commands run as written, and the figures they print are the figures
the README quotes and the benchmark tables hold.

The figures are read from three places and never written into this test: what the commands
print, the bold figures of the README paragraph under the commands, and
benchmarks/results/quality.json (written by benchmarks/bench_quality.py). Tolerances: a
command's figure and the results file agree within 2% (the simulator is deterministic: a
larger gap means the table is stale -- rerun the benchmark -- or the sizes differ); the
README's figure is the results file's, rounded to the 2 decimals it prints (0.006)."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
QUALITY = REPO / "benchmarks" / "results" / "quality.json"
REL_TOL, README_TOL = 0.02, 0.006
OURS = "uvm-sched (oblivious)"  # quality.json's oblivious planner (the README's tables)


def planned_as(stdout: str) -> str:
    """quality.json's policy for the planner mode a command says it ran
    ("planner mode: auto: sampled, ..." -> "uvm-sched (sampled)")."""
    m = re.search(r"^planner mode(?: \(uvm-sched\))?: (?:auto: )?(oblivious|sampled)\b", stdout,
                  re.M)
    assert m, f"the command does not say which planner mode ran:\n{stdout[-2000:]}"
    return f"uvm-sched ({m.group(1)})"


def advisor_commands() -> list[str]:
    """The `uvm-sched` lines of the README's first bash block under "As an advisor"."""
    text = README.read_text()
    start = text.index("### As an advisor")
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    assert block, "no bash block under 'As an advisor'"
    lines = [re.sub(r"\s+#.*$", "", ln).strip() for ln in block.group(1).splitlines()]
    return [ln for ln in lines if ln.startswith("uvm-sched ")]


def readme_figures() -> list[float]:
    """The bold ratios (**2.73x**, **≥ 1.18x**) of the paragraph after the advisor block."""
    text = README.read_text()
    start = text.index("### As an advisor")
    para = text[text.index("```\n", text.index("```bash", start) + 7) + 4:]
    para = para[:para.index("\n\n", 1)]
    return [float(x) for x in re.findall(r"\*\*(?:≥ )?(\d+\.\d+)x\*\*", para)]


def table_rows(stdout: str) -> list[tuple[str | None, list[str]]]:
    """(budget % of the table it is in, cells) of each row of the printed tables."""
    out, budget = [], None
    for line in stdout.splitlines():
        m = re.match(r"budget .*\((\d+(?:\.\d+)?)% of peak", line)
        if m:
            budget = m.group(1)
        if "│" in line:
            out.append((budget, [c.strip() for c in line.split("│")]))
    return out


def ratio(cell: str) -> float:
    return float(cell.removeprefix("≥ ").removesuffix("x"))


def quality(model: str, hw: str, pct: int, policy: str) -> float:
    rows = json.loads(QUALITY.read_text())["rows"]
    hit = [r for r in rows if (r["model"], r["hw"], r["budget_pct"], r["policy"])
           == (model, hw, pct, policy)]
    assert len(hit) == 1, f"quality.json has {len(hit)} rows for {model} {hw} {pct}% {policy}"
    return float(hit[0]["slowdown"])


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """Every advisor command, run in order in one empty folder as a user would."""
    cwd = tmp_path_factory.mktemp("readme")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    done = {}
    for cmd in advisor_commands():
        argv = [sys.executable, "-m", "uvm_sched", *shlex.split(cmd)[1:]]
        done[cmd] = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env,
                                   timeout=600)
    return done


def test_readme_lists_the_commands_a_user_needs_in_order():
    cmds = advisor_commands()
    verbs = [c.split()[1] for c in cmds]
    assert verbs[0] == "record"  # the trace every later line reads is made first
    # the snapshot the perfetto export reads is made before it, on CPU
    made = next(i for i, c in enumerate(cmds) if "--to torch-snapshot" in c)
    used = next(i for i, c in enumerate(cmds) if c.split()[2].endswith(".pickle"))
    assert made < used


def test_every_readme_advisor_command_runs_as_written(ran):
    for cmd, res in ran.items():
        assert res.returncode == 0, f"{cmd!r} exited {res.returncode}: {res.stderr[-2000:]}"


def test_readme_figures_are_the_commands_and_the_tables(ran):
    cmds = list(ran)
    rec = next(c for c in cmds if c.split()[1] == "record")
    model = rec.split()[2]
    planned = next(c for c in cmds if c.split()[1] == "simulate" and "--plan" in c)
    bound = next(c for c in cmds if c.split()[1] == "simulate" and "--policy bound" in c)
    cmp_ = next(c for c in cmds if c.split()[1] == "compare")
    cmp_hw = cmp_.split("--hw", 1)[1].split()[0]

    sim_fig = ratio(next(cells[2] for _, cells in table_rows(ran[planned].stdout)
                         if cells[0].startswith("plan ")))
    bound_cell = next(cells[2] for _, cells in table_rows(ran[bound].stdout)
                      if cells[0] == "bound")
    assert bound_cell.startswith("≥ ")  # a limit, shown as one
    assert "no schedule can beat" in ran[bound].stdout
    bound_fig = ratio(bound_cell)
    cmp_fig = ratio(next(cells[2] for b, cells in table_rows(ran[cmp_].stdout)
                         if b == "50.0" and cells[0] == "uvm-sched"))
    produced = [sim_fig, bound_fig, cmp_fig]
    tables = [quality(model, "h200-pcie5", 50, planned_as(ran[planned].stdout)),
              quality(model, "h200-pcie5", 50, "bound"),
              quality(model, cmp_hw, 50, planned_as(ran[cmp_].stdout))]
    quoted = readme_figures()
    assert len(quoted) == 3, f"the README paragraph quotes {quoted}, expected 3 figures"
    for what, p, t, q in zip(("simulate --plan", "--policy bound", "compare"), produced, tables,
                             quoted):
        assert p == pytest.approx(t, rel=REL_TOL), (
            f"{what}: the command prints {p:.2f}x, quality.json holds {t:.3f}x")
        assert q == pytest.approx(t, abs=README_TOL), (
            f"{what}: the README quotes {q:.2f}x, quality.json holds {t:.3f}x")


def test_plan_and_simulate_say_how_their_stall_figures_differ(ran):
    planned = next(c for c in ran if c.split()[1] == "simulate" and "--plan" in c)
    plan = next(c for c in ran if c.split()[1] == "plan")
    assert "the planner estimated" in ran[planned].stdout
    assert "simulate TRACE --plan" in ran[plan].stdout


def test_record_says_the_sizes_it_used(ran):
    rec = next(c for c in ran if c.split()[1] == "record")
    model = rec.split()[2]
    from uvm_sched.trace import zoo

    info = zoo.info(model)
    line = ran[rec].stdout.splitlines()[0]
    assert f"batch {info['batch']:,}" in line
    assert f"{info.get('seq', info.get('image')):,}" in line


CHECKPOINTING = REPO / "benchmarks" / "results" / "checkpointing.json"


def test_when_to_use_it_figures_are_the_benchmarks():
    """The side-by-side table's figures: GPT-2 small from checkpointing.json (written by
    benchmarks/bench_checkpointing.py), LLaMA-7B from quality.json."""
    lines = README.read_text().splitlines()
    gpt = next(ln for ln in lines if ln.startswith("| GPT-2 small"))
    llama = next(ln for ln in lines if ln.startswith("| LLaMA-7B"))
    rows = {(r["model"], r["hw"]): r for r in json.loads(CHECKPOINTING.read_text())["rows"]}
    pcie, c2c = rows[("gpt2_small", "h200-pcie5")], rows[("gpt2_small", "gh200-c2c")]
    share, peak = re.search(r"at (\d+)% of its ([\d.]+) GiB", gpt).groups()
    assert int(share) == round(100 * pcie["memory_share"])
    assert float(peak) == pytest.approx(pcie["peak_bytes"] / 2**30, abs=0.006)
    ours_pcie, ours_c2c, ck = (float(x) for x in re.findall(r"(\d+\.\d+)x", gpt))
    assert ours_pcie == pytest.approx(pcie["uvm_sched_slowdown"], abs=README_TOL)
    assert ours_c2c == pytest.approx(c2c["uvm_sched_slowdown"], abs=README_TOL)
    assert ck == pytest.approx(pcie["checkpointing_slowdown"], abs=README_TOL)
    at75, at50 = (float(x) for x in re.findall(r"(\d+\.\d+)x at", llama))
    assert at75 == pytest.approx(quality("llama_7b", "h200-pcie5", 75, OURS), abs=README_TOL)
    assert at50 == pytest.approx(quality("llama_7b", "gh200-c2c", 50, OURS), abs=README_TOL)
    assert "(100%)" in llama and rows[("llama_7b", "h200-pcie5")]["memory_share"] == 1.0


def test_readme_pcie_range_table_is_quality_json():
    """The "Slowdown over ideal" table (h200-pcie5): each cell is the min-max over the zoo
    of quality.json's figures (best baseline: per model the fastest of the three), and a
    model quoted in parentheses is left out of the range and quoted alone."""
    rows = json.loads(QUALITY.read_text())["rows"]

    def per_model(pct: int, policies: tuple[str, ...]) -> dict[str, float]:
        out: dict[str, float] = {}
        for r in rows:
            if (r["hw"], r["budget_pct"]) == ("h200-pcie5", pct) and r["policy"] in policies \
                    and not r["error"] and r["slowdown"] is not None:
                out[r["model"]] = min(out.get(r["model"], float("inf")), float(r["slowdown"]))
        return out

    cols = [(OURS,), ("uvm-sched (sampled)",), ("demand", "prefetch-on-alloc", "swap-activations"),
            ("bound",)]
    lines = [ln for ln in README.read_text().splitlines() if re.match(r"\| \d+% of peak \|", ln)]
    assert len(lines) == 2
    for ln in lines:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        pct = int(cells[0].split("%")[0])
        for cell, pols in zip(cells[1:], cols):
            lo, hi = (float(x) for x in re.match(r"(\d+\.\d+)–(\d+\.\d+)x", cell).groups())
            vals = per_model(pct, pols)
            alone = re.search(r"\((\w+) (\d+\.\d+)x\)", cell)
            if alone:
                assert float(alone.group(2)) == pytest.approx(vals.pop(alone.group(1)),
                                                              abs=README_TOL), cell
            assert lo == pytest.approx(min(vals.values()), abs=README_TOL), (pct, cell)
            assert hi == pytest.approx(max(vals.values()), abs=README_TOL), (pct, cell)
