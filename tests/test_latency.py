"""Lean imports: the simulate package and each CLI command load only what they need (fresh subprocesses)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("jax", "matplotlib", "scipy", "seaborn", "torch")

RUN_CLI = """
import sys
from gradlab_cli.app import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert exc.code in (0, None), exc.code
print("loaded:", *(m for m in {heavy!r} if m in sys.modules))
"""


def _loaded(code: str, *args, tmp_path=None) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADLAB_CACHE_DIR": "off", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("loaded:"), proc.stdout[-2000:]
    return set(last.split()[1:])


def test_import_gradlab_simulate_pulls_in_neither_scipy_nor_matplotlib():
    loaded = _loaded(f"import sys, gradlab.simulate; print('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))")
    assert "jax" in loaded  # the witness that the probe sees imports at all
    assert not loaded & {"scipy", "matplotlib", "seaborn", "torch"}, loaded


def test_import_gradlab_is_cheap():
    assert _loaded(f"import sys, gradlab; print('loaded:', *(m for m in {HEAVY!r} if m in sys.modules))") == set()


@pytest.mark.parametrize("args", [["--help"], ["heatmap", "--help"], ["figures", "--help"], ["track", "--help"]])
def test_cli_help_imports_no_jax_and_no_matplotlib(args):
    assert _loaded(RUN_CLI.format(heavy=HEAVY), *args) == set()


def test_heatmap_no_plot_imports_no_matplotlib(tmp_path):
    loaded = _loaded(RUN_CLI.format(heavy=HEAVY), "heatmap", "--loss", "infonce", "--grid", 3, "--batches", 4,
                     "--batch-size", 4, "--no-plot", "--out", tmp_path, tmp_path=tmp_path)
    assert loaded == {"jax"}, loaded
    assert (tmp_path / "heatmap_infonce_gd.npz").exists()
