"""Every bad input to the command line is exit 2 with one line naming the problem, never
exit 1 "internal error" (issue class 8), and nothing is written on the way out."""
from __future__ import annotations

import json
import os

import pytest

from _reliability import run_cli, small_trace
from uvm_sched.trace import TraceBuilder


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    small_trace().save(d / "t.parquet")
    b = TraceBuilder(name="no-allocs")
    for _ in range(3):
        b.mark()
        b.next_tick(5.0)
    b.build().save(d / "empty.parquet")
    (d / "bin.toml").write_bytes(bytes(range(256)) * 4)
    (d / "text.toml").write_text('name = "x"\n')
    (d / "nan.toml").write_text((d / "text.toml").read_text())
    os.mkfifo(d / "fifo")
    assert run_cli("plan", d / "t.parquet", "-q", "-o", d / "p.json")[0] == 0
    doc = json.loads((d / "p.json").read_text())
    for name, value in (("neg", -5), ("str", "abc"), ("float", 1.5e30)):
        bad = json.loads(json.dumps(doc))
        bad["meta"]["budget_bytes"] = value
        (d / f"budget_{name}.json").write_text(json.dumps(bad))
    return d


BAD = [
    # budgets
    ["plan", "{d}/t.parquet", "--budget", "inf"],
    ["plan", "{d}/t.parquet", "--budget", "-inf"],
    ["plan", "{d}/t.parquet", "--budget", "nan"],
    ["plan", "{d}/t.parquet", "--budget", "1e30GiB"],
    ["plan", "{d}/t.parquet", "--budget", "1e-9%"],
    ["plan", "{d}/t.parquet", "--budget", "0"],
    ["plan", "{d}/t.parquet", "--budget", "-3GiB"],
    ["plan", "{d}/t.parquet", "--budget", "150%"],
    ["plan", "{d}/t.parquet", "--budget", "lots"],
    ["compare", "{d}/t.parquet", "--budget", "50%,inf"],
    ["simulate", "{d}/t.parquet", "--budget", "1e400"],
    # hardware profiles
    ["plan", "{d}/t.parquet", "--hw", "{d}/bin.toml"],
    ["plan", "{d}/t.parquet", "--hw", "{d}/text.toml"],
    ["plan", "{d}/t.parquet", "--hw", "{d}/fifo"],
    ["plan", "{d}/t.parquet", "--hw", "/dev/zero"],
    ["plan", "{d}/t.parquet", "--hw", "no-such-gpu"],
    # traces
    ["plan", "{d}/empty.parquet"],
    ["simulate", "{d}/empty.parquet"],
    ["compare", "{d}/empty.parquet"],
    ["analyze", "{d}/empty.parquet"],
    ["analyze", "{d}/fifo"],
    ["analyze", "/dev/zero"],
    ["analyze", "{d}/bin.toml"],
    ["analyze", "{d}/missing.parquet"],
    # plans
    ["simulate", "{d}/t.parquet", "--plan", "{d}/budget_neg.json"],
    ["simulate", "{d}/t.parquet", "--plan", "{d}/budget_str.json"],
    ["simulate", "{d}/t.parquet", "--plan", "{d}/budget_float.json"],
    ["simulate", "{d}/t.parquet", "--plan", "{d}/t.parquet"],
    ["simulate", "{d}/t.parquet", "--plan", "{d}/fifo"],
    ["report", "{d}/t.parquet", "--plan", "{d}/bin.toml", "-o", "{d}/r.html"],
    # arguments
    ["plan", "{d}/t.parquet", "--sample-rate", "2"],
    ["plan", "{d}/t.parquet", "--noise", "nan"],
    ["plan", "{d}/t.parquet", "--mode", "psychic"],
    ["record", "unet", "--batch", "1.5"],
    ["record", "unet", "--batch", "-1"],
    ["compare", "{d}/t.parquet", "--policies", "bogus"],
    ["plan", "{d}/t.parquet", "-o", "{d}/no/such/folder/p.json"],
    ["plan", "{d}/t.parquet", "-o", "{d}"],
    ["plan", "{d}/t.parquet", "-o", "/dev/null"],
]


@pytest.mark.parametrize("args", BAD, ids=lambda a: " ".join(a).replace("{d}/", ""))
def test_bad_input_is_exit_2_with_one_clear_line(files, args):
    before = sorted(os.listdir(files))
    code, out, err = run_cli(*[a.format(d=files) for a in args], "-q")
    assert code == 2, err
    assert "internal error" not in err and "Traceback" not in err
    assert err.strip() and len(err.strip().splitlines()) == 1, err
    assert sorted(os.listdir(files)) == before  # nothing written on the way out
