"""The notebooks run top to bottom on a CPU (a cell that raises fails), and are stored clean."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
EXPECTED = ["01_explore_a_trace.ipynb", "02_plan_and_simulate.ipynb", "03_on_a_gpu.ipynb"]


@pytest.fixture(scope="module")
def kernel(tmp_path_factory) -> str:
    """The python3 kernel, installed for this user when no kernel spec is found."""
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3" not in KernelSpecManager().find_kernel_specs():
        subprocess.run([sys.executable, "-m", "ipykernel", "install", "--user"], check=True,
                       capture_output=True)
    return "python3"


def test_all_three_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == EXPECTED


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    dirty = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs; clear them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, kernel, monkeypatch, tmp_path):
    # the kernel imports this checkout even where the package is not installed
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # files the notebooks write land here
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, kernel_name=kernel, timeout=240,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()  # raises CellExecutionError naming the cell that failed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    ran = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in ran)
    _check_every_figure_travels(nb, path)


# Figures each notebook draws when run on a CPU (the GPU notebook draws its live-run figures
# only on a GPU; on a CPU the replayed executor log and the plan's lifetime chart).
FIGURES_ON_CPU = {"01_explore_a_trace.ipynb": 4, "02_plan_and_simulate.ipynb": 5,
                  "03_on_a_gpu.ipynb": 2}


def _check_every_figure_travels(nb, path) -> None:
    """Every figure output carries a PNG (what exported HTML, nbviewer and repository
    viewers show: they render no plotly JSON), and the page nbconvert exports shows one
    image per figure."""
    figures = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
               if o.output_type in ("display_data", "execute_result")
               and ({"application/vnd.plotly.v1+json", "image/png"} & set(o.get("data", {})))]
    without_png = [o for o in figures if "image/png" not in o["data"]]
    assert not without_png, f"{path.name}: figures without a static image: {without_png[:1]}"
    from conftest import cuda_device_reason

    if cuda_device_reason() is not None or path.name != "03_on_a_gpu.ipynb":
        assert len(figures) == FIGURES_ON_CPU[path.name], (path.name, len(figures))
    nbconvert = pytest.importorskip("nbconvert")
    page, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert len(re.findall(r'<img [^>]*src="data:image/png;base64,', page)) == len(figures)
