"""XLA_FLAGS for a child process of the suite: the suite's own flags (tests/conftest.py), with
the simulated host device count replaced."""

from __future__ import annotations

import os


def xla_flags(devices: int = 1) -> str:
    """This process's XLA_FLAGS without any device count, plus ``devices`` CPU devices when > 1
    (``--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=4`` for 4 in the suite)."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if devices > 1:
        kept.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(kept)
