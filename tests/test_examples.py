"""The examples run as scripts and print what they claim (the quick ones; the simulate one is slow)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(name, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                          timeout=timeout, check=True).stdout


def test_decompose_example_finds_the_paradigm():
    out = _run("decompose_your_loss.py")
    residual = float(out.split("residual (max over anchors):")[1].split()[0])
    assert residual < 1e-10
    assert "weight shares equal InfoNCE's: True" in out


@pytest.mark.slow
def test_simulate_example_agrees_with_quadrature():
    out = _run("simulate_gd_map.py", timeout=900)
    assert "Monte-Carlo vs quadrature: 100.0% of cells" in out or "99." in out
