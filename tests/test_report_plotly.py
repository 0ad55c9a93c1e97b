"""The report carries plotly.js inlined (default: it opens offline) or linked from the CDN
(``viz.report(..., plotly="cdn")``, ``uvm-sched report --plotly cdn``)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("plotly")

from uvm_sched import viz  # noqa: E402
from uvm_sched.trace import TraceBuilder  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MiB = 1 << 20


def _trace():
    b = TraceBuilder(name="toy")
    w = b.alloc(8 * MiB)
    for _ in range(3):
        b.mark()
        a = b.alloc(4 * MiB)
        b.access(a)
        b.access(w)
        b.next_tick(1e6)
        b.free(a)
        b.next_tick(1e6)
    return b.build()


def test_the_report_inlines_plotly_by_default_and_links_the_cdn_on_request():
    import plotly.offline

    t = _trace()
    inline = viz.report(t)
    cdn = viz.report(t, plotly="cdn")
    version = plotly.offline.get_plotlyjs_version()
    tag = f'<script src="https://cdn.plot.ly/plotly-{version}.min.js" charset="utf-8"></script>'
    assert cdn.count(tag) == 1 and 'src="https://cdn.plot.ly' not in inline
    assert inline.count(plotly.offline.get_plotlyjs()) == 1
    assert len(inline) - len(cdn) > 3_000_000  # plotly.js itself
    # the figures are the same
    assert re.findall(r'class="uvm-fig"[^>]*>', inline) == re.findall(r'class="uvm-fig"[^>]*>', cdn)
    with pytest.raises(ValueError, match="inline, cdn"):
        viz.report(t, plotly="none")


def test_the_report_command_takes_plotly_cdn(tmp_path):
    src = tmp_path / "t.parquet"
    _trace().save(src)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    for mode in ("inline", "cdn"):
        out = tmp_path / f"{mode}.html"
        p = subprocess.run([sys.executable, "-m", "uvm_sched", "report", str(src), "--no-sim",
                            "--plotly", mode, "-o", str(out)], capture_output=True, text=True,
                           env=env, timeout=300)
        assert p.returncode == 0, p.stderr
    assert 'src="https://cdn.plot.ly' in (tmp_path / "cdn.html").read_text()
    assert 'src="https://cdn.plot.ly' not in (tmp_path / "inline.html").read_text()
    assert (tmp_path / "inline.html").stat().st_size - (tmp_path / "cdn.html").stat().st_size > 3_000_000
