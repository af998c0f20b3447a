"""The engine across processes: two local CPU processes under ``jax.distributed`` give one process's maps bit for bit."""

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from tests._xla import xla_flags

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent("""
    import sys
    import jax
    n, rank, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    if n > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=n, process_id=rank)
    assert jax.process_count() == n and len(jax.devices()) == n
    import numpy as np
    from gradlab.simulate import Protocol, gd_map, weight_map
    maps = {
        "common": gd_map("infonce", Protocol(grid=(7, 5), batches=24, batch_size=8)).mean,
        "independent": gd_map("arccon", Protocol(grid=(5, 3), batches=16, batch_size=6, mode="independent")).mean,
        "weight": weight_map("infonce", Protocol(grid=(3, 6), batches=10, batch_size=5)).mean,
    }
    np.savez(out, **{k: np.asarray(v) for k, v in maps.items()})
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path, n: int, rank: int, port: int):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", "GRADLAB_CACHE_DIR": "off",
           "XLA_FLAGS": xla_flags(1)}  # one CPU device per process
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / f"maps_{n}_{rank}.npz"
    proc = subprocess.Popen([sys.executable, str(script), str(n), str(rank), str(port), str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc, out


# three JAX processes: about 4 s on an idle 2-core CPU
def test_two_processes_give_one_process_map_bit_for_bit(tmp_path):
    port = _free_port()
    procs = [_launch(tmp_path, 1, 0, 0), _launch(tmp_path, 2, 0, port), _launch(tmp_path, 2, 1, port)]
    for proc, _ in procs:
        log, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, log[-3000:]
    with np.load(procs[0][1]) as one:
        expected = {k: one[k] for k in one.files}
    for _, out in procs[1:]:
        with np.load(out) as got:
            for name, value in expected.items():
                assert value.shape == got[name].shape
                np.testing.assert_array_equal(got[name], value, err_msg=name)
                assert np.isfinite(value).any()
