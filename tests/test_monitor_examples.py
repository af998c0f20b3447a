"""The monitor's framework examples run as scripts (the PyTorch one only where torch is installed)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(name, *args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          timeout=timeout, check=True, env=env).stdout


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed")
def test_torch_simcse_loop_agrees_with_torch():
    out = _run("monitor_torch_loop.py", "--steps", "20")
    worst = float(out.split("(mu_pos, mu_neg, InfoNCE GD):")[1].split()[0])
    assert worst < 1e-5  # float32 monitor against torch's float64 on the same tensors
    assert "gradlab read tensors that require grad" in out


def test_optax_loop_logs_to_a_tracker(tmp_path):
    args = ["--steps", "40"]
    if importlib.util.find_spec("tensorboardX") is not None:
        args += ["--logdir", str(tmp_path / "tb")]
    out = _run("monitor_optax_loop.py", *args)
    assert "paradigm/gd_mean/infonce at steps [0, 10, 20, 30]" in out
    if "--logdir" in args:
        assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "tb").iterdir())
