"""Helpers of the reliability tests (tests/test_reliability_*.py) and of
benchmarks/bench_reliability.py: a small trace and plan, a full disk and a read-only folder
(real ones on a small tmpfs where this machine lets us mount one, else simulated), and the
CLI run in-process with its exit code and stderr."""
from __future__ import annotations

import contextlib
import errno
import io
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator
from unittest import mock

REPO = Path(__file__).resolve().parents[1]


def small_trace(**kw):
    """A marked training trace of ~200 events (plans in ~30 ms)."""
    from uvm_sched.pattern._synth import training_trace

    opts = dict(markers=True, layers=2, iters=3, width=256)
    opts.update(kw)
    return training_trace(**opts)


def run_cli(*args) -> tuple[int, str, str]:
    """``uvm-sched ARGS`` in this process: (exit code, stdout, stderr)."""
    from uvm_sched import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as e:  # argparse
            code = int(e.code or 0)
    return code, out.getvalue(), err.getvalue()


def _mount_tmpfs(folder: Path, size: str, *, ro: bool = False) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    opts = f"size={size}" + (",ro" if ro else "")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(folder)],
                       capture_output=True)
    return r.returncode == 0


def _umount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], capture_output=True)


@contextlib.contextmanager
def full_disk(folder: Path, keep: dict[str, bytes] | None = None) -> Iterator[str]:
    """``folder`` as a file system with no space left, holding the files ``keep`` (name ->
    bytes) written before it filled. Yields how: ``"tmpfs"`` (a real 1 MiB tmpfs, filled)
    or ``"simulated"`` (writes beside fail with ENOSPC when files are made final)."""
    folder.mkdir(parents=True, exist_ok=True)
    if _mount_tmpfs(folder, "1m"):
        try:
            for name, data in (keep or {}).items():
                (folder / name).write_bytes(data)
            with contextlib.suppress(OSError), open(folder / ".filler", "wb") as f:
                while True:
                    f.write(b"\0" * 65536)
            with contextlib.suppress(OSError), open(folder / ".filler2", "wb") as f:
                while True:
                    f.write(b"\0" * 512)
            yield "tmpfs"
        finally:
            _umount(folder)
        return
    for name, data in (keep or {}).items():
        (folder / name).write_bytes(data)

    def enospc(_p):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with mock.patch("uvm_sched._files._fsync_file", enospc):
        yield "simulated"


@contextlib.contextmanager
def readonly_dir(folder: Path, keep: dict[str, bytes] | None = None) -> Iterator[str]:
    """``folder`` holding ``keep``, then made read-only: a read-only tmpfs (root), mode 0555
    (not root), or simulated (EROFS when a file is made beside)."""
    folder.mkdir(parents=True, exist_ok=True)
    if _mount_tmpfs(folder, "4m"):
        try:
            for name, data in (keep or {}).items():
                (folder / name).write_bytes(data)
            r = subprocess.run(["mount", "-o", "remount,ro", str(folder)], capture_output=True)
            if r.returncode == 0:
                yield "tmpfs-ro"
                return
        finally:
            _umount(folder)
    for name, data in (keep or {}).items():
        (folder / name).write_bytes(data)
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield "chmod"
        finally:
            folder.chmod(0o755)
        return

    real = os.open

    def erofs(path, flags, *a, **k):
        if Path(path).parent == folder and flags & (os.O_CREAT | os.O_WRONLY | os.O_RDWR):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real(path, flags, *a, **k)

    with mock.patch("os.open", erofs), mock.patch("os.access", lambda *a, **k: True):
        yield "simulated"


def leftovers(folder: Path, expected: set[str]) -> list[str]:
    """Names in ``folder`` other than ``expected`` and the filler files."""
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in expected and not p.name.startswith(".filler"))


__all__ = ["small_trace", "run_cli", "full_disk", "readonly_dir", "leftovers", "REPO"]
