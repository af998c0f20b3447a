"""XLA_FLAGS for a child process of the suite: the suite's own flags (tests/conftest.py), with
the simulated host device count replaced; the programs XLA compiles in a block (JAX's log)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator


def xla_flags(devices: int = 1) -> str:
    """This process's XLA_FLAGS without any device count, plus ``devices`` CPU devices when > 1
    (``--xla_backend_optimization_level=0 --xla_force_host_platform_device_count=4`` for 4 in the suite)."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    if devices > 1:
        kept.append(f"--xla_force_host_platform_device_count={devices}")
    return " ".join(kept)


@contextlib.contextmanager
def compilations() -> Iterator[list[str]]:
    """The names (``jit(step)``, ...) of the programs XLA compiles inside the block, in order, from
    JAX's compile log (``jax.log_compiles``)."""
    import jax

    names: list[str] = []

    class Names(logging.Handler):
        def emit(self, record):
            if m := re.match(r"Finished XLA compilation of (\S+) in", record.getMessage()):
                names.append(m.group(1))

    logger, handler = logging.getLogger("jax"), Names(logging.WARNING)
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield names
    finally:
        logger.removeHandler(handler)
