"""The report carries plotly.js inlined (default: it opens offline), in a file beside the page
(``plotly="file"``: opens offline, the page stays small; the demo's default) or linked from the
CDN (``viz.report(..., plotly="cdn")``, ``uvm-sched report --plotly cdn``); and its numbers
travel in the smallest typed arrays that draw the same figure."""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
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
    with pytest.raises(ValueError, match="inline, file, cdn"):
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


def test_file_mode_loads_plotly_from_beside_the_page_written_once(tmp_path):
    import plotly.offline

    t = _trace()
    page = viz.report(t, plotly="file")
    name = viz.plotly_js_name()
    assert name == f"plotly-{plotly.offline.get_plotlyjs_version()}.min.js"
    assert page.count(f'<script src="{name}" charset="utf-8"></script>') == 1
    assert plotly.offline.get_plotlyjs()[:2000] not in page and "cdn.plot.ly" not in page
    assert len(viz.report(t)) - len(page) > 3_000_000
    js = viz.write_plotly_js(tmp_path)
    assert js == tmp_path / name and js.read_text() == plotly.offline.get_plotlyjs()
    os.utime(js, (1, 1))
    assert viz.write_plotly_js(tmp_path) == js and js.stat().st_mtime == 1  # same bytes: kept
    js.write_text("stale")
    viz.write_plotly_js(tmp_path)
    assert js.read_text() == plotly.offline.get_plotlyjs()  # other bytes: replaced


def test_the_report_command_writes_plotly_beside_the_page_and_says_so(tmp_path):
    src = tmp_path / "t.parquet"
    _trace().save(src)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    out = tmp_path / "out" / "r.html"
    out.parent.mkdir()
    p = subprocess.run([sys.executable, "-m", "uvm_sched", "report", str(src), "--no-sim",
                        "--plotly", "file", "-o", str(out), "--json"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    js = out.parent / viz.plotly_js_name()
    assert doc["path"] == str(out) and doc["plotly_js"] == str(js) and js.is_file()
    assert f'src="{js.name}"' in out.read_text() and out.stat().st_size < 1_000_000
    p = subprocess.run([sys.executable, "-m", "uvm_sched", "report", str(src), "--no-sim",
                        "--plotly", "file", "-o", str(out)], capture_output=True, text=True,
                       env=env, timeout=300)
    said = (p.stdout + p.stderr).replace("\n", "")  # rich wraps long lines
    assert p.returncode == 0 and str(out.resolve()) in said and str(js.resolve()) in said


def _decode(spec):
    shape = tuple(int(n) for n in spec.get("shape", "-1").split(","))
    return np.frombuffer(base64.b64decode(spec["bdata"]), dtype=spec["dtype"]).reshape(shape)


def test_numbers_travel_in_the_smallest_type_that_draws_the_same_figure():
    import plotly.graph_objects as go

    from uvm_sched.viz._report import _figure_json

    ms = np.round(np.arange(1_001) * 9.999_7, 3)  # positions: ms on the 1 us grid, up to 10 s
    long_ms = ms + 1e6  # float32 cannot keep the 1 us grid this far out
    ticks = np.arange(1_001, dtype=np.float64) * 70
    cd = np.stack([ticks, np.where(ticks > 100, np.nan, 0.5)], axis=1)
    fine = 10_000 + ms / 1e4  # a value hovers print with 4 decimals: float32 would move it
    fig = go.Figure([go.Scatter(x=ms, y=ticks, customdata=cd),
                     go.Scatter(x=long_ms, y=-ticks, customdata=np.arange(3) * 2**40),
                     go.Scatter(x=ticks, y=fine)])
    text, template = _figure_json(fig)
    doc = json.loads(text)
    a, b, c = doc["data"]
    assert "template" not in doc["layout"] and template  # the page carries it once
    assert (a["x"]["dtype"], a["y"]["dtype"], a["customdata"]["dtype"]) == ("f4", "u4", "f4")
    assert (b["x"]["dtype"], b["y"]["dtype"], b["customdata"]["dtype"]) == ("f8", "i4", "f8")
    assert (c["x"]["dtype"], c["y"]["dtype"]) == ("u4", "f8")
    assert np.array_equal(np.round(_decode(a["x"]).astype(np.float64), 3), ms)  # prints the same
    assert np.array_equal(_decode(a["y"]), ticks) and np.array_equal(_decode(b["x"]), long_ms)
    assert np.array_equal(_decode(a["customdata"]), cd.astype(np.float32), equal_nan=True)
    assert np.array_equal(_decode(b["customdata"]), np.arange(3) * 2.0**40)
    assert np.array_equal(_decode(c["y"]), fine)
