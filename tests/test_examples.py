"""The examples run as scripts and print what they claim (the quick ones; the simulate one is slow)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(name, timeout=300):
    return subprocess.run([sys.executable, str(ROOT / "examples" / name)], capture_output=True, text=True,
                          timeout=timeout, check=True).stdout


def test_decompose_example_finds_the_paradigm():
    out = _run("decompose_your_loss.py")
    residual = float(out.split("residual (max over anchors):")[1].split()[0])
    assert residual < 1e-10
    assert "weight shares equal InfoNCE's: True" in out


def test_simulate_example_agrees_with_quadrature():
    out = _run("simulate_gd_map.py", timeout=900)
    within = float(out.split("Monte-Carlo vs quadrature:")[1].split("%")[0])
    p_adjusted = float(out.split("over the cells:")[1].split()[0])
    # every cell's count is consistent with the exact Binomial(B, p) law; the 4-standard-error
    # rule fails only in the tails (p within ~1e-4 of 0 or 1), where it is not a valid test
    assert p_adjusted > 1e-3 and within >= 95.0, (p_adjusted, within)
