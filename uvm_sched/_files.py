"""Files in and out: outputs appear whole or not at all; inputs are regular files of a
sane size, checked before a byte is read.

Outputs. The rule: write beside the destination (a hidden temporary file in the same folder, so the
final rename never crosses a file system), flush and ``fsync`` it, ``os.replace`` it over
the destination, then ``fsync`` the folder so the rename itself survives a crash. On any
failure (a full disk, a read-only folder, an exception in the writer) the temporary file is
removed and the destination keeps its old contents -- a plan overwritten on a full disk
stays the old plan, never a truncated one.

Why one helper: writing in place was how a full disk turned ``plan -o plan.json`` into an
8 KiB stump and ``compare --plot`` into a 0-byte file; every writer (traces, plans,
exports, reports, plots) goes through here so no path is left that does it differently.

Inputs. ``input_file`` refuses what is not a regular file (a FIFO with no writer would
block ``read`` forever, ``/dev/zero`` never ends) and a file larger than the reader's limit
(a 20 GiB sparse file costs nothing on disk and 20 GiB of memory to read whole), by
``stat`` alone, before opening it.
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_path", "write_atomic", "same_file", "input_file"]


@contextlib.contextmanager
def atomic_path(path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` for a writer that wants a file name (pyarrow,
    plotly, matplotlib); when the block ends without an exception the file is fsynced and
    renamed over ``path``. Raises what the writer or the file system raised (``OSError``
    with ``ENOSPC``, ``EACCES``...), leaving ``path`` untouched and no temporary behind."""
    dest = Path(path)
    folder = dest.parent if str(dest.parent) else Path(".")
    # the same suffix as the destination: writers that pick a format by name still can
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", suffix=dest.suffix, dir=folder)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        _fsync_file(tmp)
        # a new file gets the mode a plain open() would have given it, not mkstemp's 0600
        mode = _target_mode(dest)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
        _fsync_dir(folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_atomic(path, data: "bytes | str") -> None:
    """Write ``data`` (bytes, or text as UTF-8) to ``path`` atomically (see the module
    docstring). Raises ``OSError`` on failure, with ``path`` unchanged."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def same_file(a, b) -> bool:
    """True when paths ``a`` and ``b`` name the same file (through links, ``..``, or
    another spelling); False when either does not exist yet."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def input_file(path, what: str, limit_bytes: int, error: type) -> int:
    """Check that ``path`` is a regular file of at most ``limit_bytes`` bytes without opening
    it; returns its size in bytes. Raises ``FileNotFoundError``, or ``error(message)`` for
    a device, FIFO, socket or folder, or a file over the limit."""
    st = os.stat(path)  # FileNotFoundError / PermissionError pass through as they are
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{path}: is a folder, not a {what} file")
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else
                "a character device" if stat.S_ISCHR(st.st_mode) else
                "a block device" if stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise error(f"{path}: {kind}, not a {what} file; save the {what} to a regular file first")
    if st.st_size > limit_bytes:
        raise error(f"{path}: {st.st_size:,} bytes is larger than any {what} file this reads "
                    f"({limit_bytes:,} bytes)")
    return int(st.st_size)


def _fsync_file(p: Path) -> None:
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened (some network file systems)
        return
    try:
        os.fsync(fd)
    except OSError:  # fsync of a directory is refused on some file systems: best effort
        pass
    finally:
        os.close(fd)


def _target_mode(dest: Path) -> int:
    try:
        return dest.stat().st_mode & 0o7777  # keep an existing file's permissions
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
