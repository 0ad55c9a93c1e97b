"""Kernel-level workload folders (kernels.csv + tensors.csv): the G10 artifact's folders
load and validate with the CSVs' sizes and times; iterations; strict parsing."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from uvm_sched.trace import COLUMNS, AccessMode, EventKind, TraceError, load

A, F, X, M = EventKind.ALLOC, EventKind.FREE, EventKind.ACCESS, EventKind.MARK


def read_csvs(folder: Path):
    with open(folder / "kernels.csv", newline="") as f:
        kernels = list(csv.DictReader(f))
    with open(folder / "tensors.csv", newline="") as f:
        tensors = list(csv.DictReader(f))
    return kernels, tensors


def g10_folders(g10_dir):
    folders = sorted(p for p in g10_dir.iterdir() if (p / "kernels.csv").is_file())
    assert folders, f"no workload folders in {g10_dir}"
    return folders


def test_every_g10_folder_loads_and_matches_its_csvs(g10_dir):
    for folder in g10_folders(g10_dir):
        kernels, tensors = read_csvs(folder)
        t = load(folder)  # validates
        n = len(kernels)
        assert t.meta["source"] == "g10" and t.meta["name"] == folder.name
        model, batch = folder.name.rsplit("_", 1)
        assert t.meta["model"] == model and t.meta["batch"] == int(batch)
        assert t.meta["iterations"] == 2 and t.n_ticks == 2 * n
        assert t.iteration_starts.tolist() == [0, n]
        # kernel durations (us) are the device time of their ticks, in both iterations
        dur = np.array([float(k["duration_us"]) for k in kernels]) * 1000.0
        np.testing.assert_allclose(t.tick_ns[:n], dur, rtol=1e-12)
        np.testing.assert_allclose(t.tick_ns[n:], dur, rtol=1e-12)
        # t_ns is the device timeline
        assert t.t_ns[t.tick == n][0] == pytest.approx(dur.sum(), abs=n)
        # tensor bytes: blocks of the first iteration are the tensors, with their sizes
        glob = [int(r["bytes"]) for r in tensors if r["is_global"] == "1"]
        local = [int(r["bytes"]) for r in tensors if r["is_global"] == "0"]
        bt = t.block_table()
        persistent = bt[bt["free_tick"] == -1]
        assert sorted(persistent["size"].tolist()) == sorted(glob)
        assert (persistent["alloc_tick"] == 0).all()
        first_it = bt[(bt["free_tick"] >= 0) & (bt["alloc_tick"] < n)]
        assert sorted(first_it["size"].tolist()) == sorted(local)
        assert (first_it["free_tick"] < n).all()  # a non-global tensor dies within its iteration
        second = bt[(bt["free_tick"] >= 0) & (bt["alloc_tick"] >= n)]
        assert sorted(second["size"].tolist()) == sorted(local)
        # one ACCESS per (kernel, distinct tensor)
        n_acc = sum(len(set(filter(None, k["inputs"].split(";") + k["outputs"].split(";"))))
                    for k in kernels)
        assert int((t.kind == X).sum()) == 2 * n_acc


def test_g10_access_modes_follow_inputs_and_outputs(g10_dir):
    folder = g10_folders(g10_dir)[0]
    kernels, tensors = read_csvs(folder)
    t = load(folder, iterations=1)
    assert t.n_ticks == len(kernels) and t.iteration_starts.tolist() == [0]
    # map block -> tensor: blocks are minted globals first (by id), then by first use
    acc = t.kind == X
    for k_id in (0, len(kernels) // 2, len(kernels) - 1):
        k = kernels[k_id]
        ins = set(filter(None, k["inputs"].split(";")))
        outs = set(filter(None, k["outputs"].split(";")))
        modes = sorted(t.mode[acc & (t.tick == k_id)].tolist())
        want = sorted([AccessMode.READ_WRITE] * len(ins & outs) + [AccessMode.READ] * len(ins - outs)
                      + [AccessMode.WRITE] * len(outs - ins))
        assert modes == want


def write_workload(folder: Path, kernels: str, tensors: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernels.csv").write_text(kernels)
    (folder / "tensors.csv").write_text(tensors)
    return folder


K = "kernel_id,duration_us,inputs,outputs\n0,1.5,0;1,2\n1,2.0,2;1,3;1\n2,0.5,3,\n"
TS = "tensor_id,bytes,is_global\n0,4096,0\n1,8192,1\n2,4096,0\n3,12288,0\n"


def test_small_workload_exact_rows(tmp_path):
    t = load(write_workload(tmp_path / "Tiny_8", K, TS), iterations=2)
    assert t.meta["model"] == "Tiny" and t.meta["batch"] == 8
    rows = list(zip(t.tick.tolist(), t.kind.tolist(), t.block.tolist(), t.size.tolist(),
                    t.mode.tolist()))
    R, W, RW = AccessMode.READ, AccessMode.WRITE, AccessMode.READ_WRITE
    it0 = [
        (0, M, -1, 0, 0),
        (0, A, 0, 8192, 0),  # global tensor 1
        (0, A, 1, 4096, 0), (0, A, 2, 4096, 0),  # tensors 0, 2 born at kernel 0
        (0, X, 1, 4096, R), (0, X, 0, 8192, R), (0, X, 2, 4096, W),
        (0, F, 1, 4096, 0),  # tensor 0 dies after kernel 0
        (1, A, 3, 12288, 0),
        (1, X, 2, 4096, R), (1, X, 0, 8192, RW), (1, X, 3, 12288, W),
        (1, F, 2, 4096, 0),
        (2, X, 3, 12288, R),
        (2, F, 3, 12288, 0),
    ]
    assert rows[: len(it0)] == it0
    it1 = rows[len(it0):]
    assert it1[0] == (3, M, -1, 0, 0)
    assert [r for r in it1 if r[1] == A] == [(3, A, 4, 4096, 0), (3, A, 5, 4096, 0),
                                            (4, A, 6, 12288, 0)]
    assert t.tick_ns.tolist() == [1500.0, 2000.0, 500.0] * 2
    # frees are stamped at the end of their kernel, allocations at its start
    assert t.t_ns[(t.kind == F) & (t.tick == 0)].tolist() == [1500]
    assert t.t_ns[(t.kind == A) & (t.tick == 1)].tolist() == [1500]
    assert t.peak_bytes == 8192 + 4096 + 12288


@pytest.mark.parametrize(
    "kernels, tensors, match",
    [
        (K.replace("kernel_id", "kid"), TS, "header"),
        (K, TS.replace("0,4096,0", "0,4096"), "2 fields, expected 3"),
        (K, TS[:-1], "incomplete"),
        (K.replace("1,2.0", "5,2.0"), TS, "kernel_id 5, expected 1"),
        (K.replace("1,2.0", "1,-2.0"), TS, "duration_us"),
        (K.replace("1,2.0", "1,nan"), TS, "duration_us"),
        (K.replace("1,2.0", "1,abc"), TS, "duration_us"),
        (K.replace("0;1,2", "0;9,2"), TS, "tensor 9 is not in tensors.csv"),
        (K.replace("0;1,2", "0;x,2"), TS, "input tensor id"),
        (K, TS + "4,4096,0\n", "used by no kernel"),
        (K, TS.replace("1,8192,1", "1,8192,2"), "is_global"),
        (K, TS.replace("2,4096,0", "1,4096,0"), "listed twice"),
        (K, TS.replace("0,4096,0", "0,-4,0"), "bytes"),
        ("kernel_id,duration_us,inputs,outputs\n", TS, "no kernels"),
        (K, "tensor_id,bytes,is_global\n", "no tensors"),
    ],
)
def test_bad_workload_files_raise(tmp_path, kernels, tensors, match):
    folder = write_workload(tmp_path / "Bad_1", kernels, tensors)
    with pytest.raises(TraceError, match=match):
        load(folder)


def test_not_a_workload_folder_and_options(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("hi")
    with pytest.raises(TraceError, match=r"not a workload folder.*notes.txt"):
        load(tmp_path / "empty")
    half = tmp_path / "half"
    half.mkdir()
    (half / "kernels.csv").write_text(K)
    with pytest.raises(TraceError, match="tensors.csv is missing"):
        load(half)
    folder = write_workload(tmp_path / "Ok_2", K, TS)
    with pytest.raises(ValueError, match="iterations"):
        load(folder, iterations=0)
    with pytest.raises(TypeError, match="device"):
        load(folder, device="cpu")
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "nope")


def test_crlf_and_bom_are_accepted(tmp_path):
    folder = write_workload(tmp_path / "Win_4", "\ufeff" + K.replace("\n", "\r\n"),
                            TS.replace("\n", "\r\n"))
    t = load(folder)
    u = load(write_workload(tmp_path / "Win_4b", K, TS))
    assert all(np.array_equal(t.columns[k], u.columns[k]) for k in COLUMNS)
    assert t.n_ticks == 6
