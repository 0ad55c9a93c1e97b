"""One process per GPU (torchrun): each rank's allocator and Scheduler work on the rank's
device only, its trace and plan files say which rank and device they are, and
``uvm-sched analyze`` takes one trace per rank and reports each.  Two processes, the fake
CUDA driver exposing two devices (every call each process makes is logged and checked)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "native"))
import fakecuda  # noqa: E402

from conftest import REPO  # noqa: E402

RANK_LOOP = textwrap.dedent("""
    import json, os, sys
    from uvm_sched import native
    from uvm_sched.runtime import Scheduler

    MiB = 1 << 20
    out = sys.argv[1]
    rank = int(os.environ["RANK"])
    sched = Scheduler(budget="50%", warmup_iters=3, hook=False, device=rank).start()
    weights = [native.malloc(8 * MiB, device=rank) for _ in range(4)]
    for it in range(10):
        sched.step()
        if it == 4:  # the plan is made in the background: armed from here on
            assert sched.wait_planned(300), sched.last_error
        acts = [native.malloc(6 * MiB, device=rank) for _ in range(6)]
        for a in reversed(acts):
            native.free(a)
    sched.trace().save(f"{out}/trace{rank}.parquet")
    sched.plan.save(f"{out}/plan{rank}.json")
    st = sched.stats()
    sched.close()
    for w in weights:
        native.free(w)
    json.dump({"state": st["state"], "device": st["device"], "rank": st["rank"],
               "native": st["native"]}, open(f"{out}/stats{rank}.json", "w"))
""")


def test_two_ranks_each_drive_their_own_device(tmp_path):
    fake = fakecuda.fake_path()
    procs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank),
                   UVM_SCHED_BACKEND="cuda", UVM_SCHED_LIBCUDA=fake, FAKE_CUDA_DEVICES="2",
                   FAKE_CUDA_LOG=str(tmp_path / f"cuda{rank}.log"), UVM_SCHED_VERBOSE="0",
                   UVM_SCHED_ARENA_BYTES="64M", PYTHONPATH=str(REPO))
        procs.append(subprocess.Popen([sys.executable, "-c", RANK_LOOP, str(tmp_path)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    for rank in (0, 1):
        st = json.loads((tmp_path / f"stats{rank}.json").read_text())
        assert (st["state"], st["device"], st["rank"]) == ("armed", rank, rank)
        assert st["native"]["actions_issued"] > 0 and st["native"]["actions_failed"] == 0
        log = (tmp_path / f"cuda{rank}.log").read_text().splitlines()
        refused = [ln for ln in log if "->" in ln and not ln.endswith("-> 0")]
        assert not refused, refused[:5]
        # every context made current is the rank's device's primary (c1000 + device)
        ctxs = {ln.split("ctx=")[1].split()[0] for ln in log if " cuCtxSetCurrent " in ln}
        assert ctxs == {f"c{1000 + rank}"}
        to_device = [ln for ln in log if "cuMemPrefetchAsync" in ln and "loc.type=1" in ln]
        assert to_device and all(f"loc.id={rank} " in ln for ln in to_device)
        plan = json.loads((tmp_path / f"plan{rank}.json").read_text())
        meta = plan.get("meta", plan)
        assert (meta["device"], meta["rank"]) == (rank, rank)

    r = subprocess.run([sys.executable, "-m", "uvm_sched", "analyze", "--json",
                        str(tmp_path / "trace0.parquet"), str(tmp_path / "trace1.parquet")],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = json.loads(r.stdout)["ranks"]
    assert [(d["rank"], d["device"]) for d in ranks] == [(0, 0), (1, 1)]
    assert all(d["pattern"] for d in ranks)
    r = subprocess.run([sys.executable, "-m", "uvm_sched", "analyze",
                        str(tmp_path / "trace0.parquet"), str(tmp_path / "trace1.parquet")],
                       cwd=REPO, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert "== rank 0, device 0:" in r.stdout and "== rank 1, device 1:" in r.stdout
