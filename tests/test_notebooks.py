"""The notebooks are stored without outputs (CI and the docs build regenerate them), and each one
is linked from the README and listed in the site's nav. `make test` executes them (nbmake)."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_five_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == ["01_paradigm_tour.ipynb", "02_paper_maps.ipynb",
                                           "03_design_a_loss.ipynb", "04_monitor_and_results.ipynb",
                                           "05_explore.ipynb"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, path.name
    stale = [i for i, c in enumerate(code) if c.get("outputs") or c.get("execution_count") is not None]
    assert not stale, f"{path.name}: code cells {stale} carry outputs; clear them (jupyter nbconvert --clear-output)"
    assert nb["metadata"]["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_linked_from_the_readme_and_the_site(path):
    assert f"](notebooks/{path.name})" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert f": notebooks/{path.name}\n" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
