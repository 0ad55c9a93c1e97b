"""Outputs are whole or absent: every file the CLI writes goes beside, fsync, rename, so a
full disk or a read-only folder leaves the old file as it was and nothing else behind;
and an output that names an input is refused before any work (issue classes 1 and 2)."""
from __future__ import annotations

import pytest

from _reliability import full_disk, leftovers, readonly_dir, run_cli, small_trace

OLD = b'{"old": "plan, must survive"}\n'


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("in") / "t.parquet"
    small_trace().save(p)
    return p


@pytest.fixture(scope="module")
def plan_file(trace_file):
    out = trace_file.with_name("p.json")
    assert run_cli("plan", trace_file, "-q", "-o", out)[0] == 0
    return out


# each command writing a file: (args before -o/--plot, the output's name)
WRITERS = {
    "plan": (["plan", "{trace}", "-q", "-o"], "out.json"),
    "plan-parquet": (["plan", "{trace}", "-q", "-o"], "out.parquet"),
    "report": (["report", "{trace}", "-q", "--no-sim", "-o"], "out.html"),
    "compare-plot": (["compare", "{trace}", "-q", "--budget", "90%", "--plot"], "out.html"),
    "export-perfetto": (["export", "{trace}", "-q", "--to", "perfetto", "-o"], "out.json"),
    "export-snapshot": (["export", "{trace}", "-q", "--to", "torch-snapshot", "-o"], "out.pickle"),
}


def _args(name, trace_file, dest):
    args, _ = WRITERS[name]
    return [a.format(trace=trace_file) for a in args] + [dest]


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_a_full_disk_keeps_the_old_output_and_leaves_nothing_behind(name, trace_file, tmp_path):
    folder = tmp_path / "disk"
    dest_name = WRITERS[name][1]
    with full_disk(folder, keep={dest_name: OLD}) as how:
        code, _, err = run_cli(*_args(name, trace_file, folder / dest_name))
        assert code == 2, (how, err)
        assert "cannot write" in err and "No space left" in err, err
        assert (folder / dest_name).read_bytes() == OLD, how
        assert leftovers(folder, {dest_name}) == [], how


@pytest.mark.parametrize("name", ["plan", "report", "export-perfetto"])
def test_a_read_only_folder_is_exit_2_with_the_old_file_intact(name, trace_file, tmp_path):
    folder = tmp_path / "ro"
    dest_name = WRITERS[name][1]
    with readonly_dir(folder, keep={dest_name: OLD}) as how:
        code, _, err = run_cli(*_args(name, trace_file, folder / dest_name))
        assert code == 2, (how, err)
        assert "cannot write" in err, err
        assert (folder / dest_name).read_bytes() == OLD
        assert leftovers(folder, {dest_name}) == []


@pytest.mark.parametrize("name", sorted(WRITERS))
def test_an_output_that_succeeds_is_complete_and_alone(name, trace_file, tmp_path):
    dest = tmp_path / WRITERS[name][1]
    dest.write_bytes(OLD)
    code, _, err = run_cli(*_args(name, trace_file, dest))
    assert code == 0, err
    assert dest.read_bytes() != OLD and dest.stat().st_size > 0
    assert leftovers(tmp_path, {dest.name}) == []


@pytest.mark.parametrize("args", [
    ["plan", "{trace}", "-o", "{trace}"],
    ["export", "{trace}", "--to", "perfetto", "-o", "{trace}"],
    ["export", "{trace}", "--to", "torch-snapshot", "-o", "{trace}"],
    ["compare", "{trace}", "--plot", "{trace}"],
    ["report", "{trace}", "--no-sim", "-o", "{trace}"],
    ["report", "{trace}", "--plan", "{plan}", "--no-sim", "-o", "{plan}"],
    ["plan", "{trace}", "-o", "{alias}"],
])
def test_an_output_naming_an_input_is_refused_and_the_input_kept(args, trace_file, plan_file,
                                                                  tmp_path):
    before = {p: p.read_bytes() for p in (trace_file, plan_file)}
    alias = trace_file.parent / ".." / trace_file.parent.name / trace_file.name  # same file
    code, _, err = run_cli(*[a.format(trace=trace_file, plan=plan_file, alias=alias)
                             for a in args])
    assert code == 2 and "it is the input" in err, err
    assert {p: p.read_bytes() for p in before} == before


def test_a_writer_that_fails_midway_leaves_no_partial_file(tmp_path):
    from uvm_sched._files import atomic_path

    dest = tmp_path / "x.json"
    dest.write_bytes(OLD)
    with pytest.raises(RuntimeError):
        with atomic_path(dest) as tmp:
            tmp.write_bytes(b"half a fi")
            raise RuntimeError("writer died")
    assert dest.read_bytes() == OLD
    assert leftovers(tmp_path, {"x.json"}) == []


def test_an_output_keeps_the_permissions_of_the_file_it_replaces(tmp_path):
    from uvm_sched._files import write_atomic

    dest = tmp_path / "x.txt"
    dest.write_text("old")
    dest.chmod(0o640)
    write_atomic(dest, "new")
    assert dest.read_text() == "new" and dest.stat().st_mode & 0o777 == 0o640
