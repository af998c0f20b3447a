"""Multi-device: the grid sharded over 4 forced host devices gives the one-device numbers, bit for bit."""

import os
import subprocess
import sys
import textwrap

import numpy as np

from tests._xla import xla_flags

SCRIPT = textwrap.dedent(
    """
    import sys, jax, numpy as np
    from gradlab.simulate import Protocol, gd_map, lemma1_map, weight_share
    out = {"devices": np.array(len(jax.devices()))}
    for mode in ("common", "independent"):
        p = Protocol(grid=(5, 3), batches=24, batch_size=7, mode=mode, chunk=1)
        out[mode + "_infonce"] = gd_map("infonce", p).mean
        out[mode + "_met"] = gd_map("met", p).mean
        out[mode + "_lemma"] = lemma1_map(p).satisfied
        out[mode + "_w"] = weight_share(p, taus=(0.05,), gd_gate=0.3).mean
    np.savez(sys.argv[1], **out)
    """
)


def _run(tmp_path, n_devices):
    env = dict(os.environ)
    env["XLA_FLAGS"] = xla_flags(n_devices)
    env["JAX_PLATFORMS"] = "cpu"
    path = tmp_path / f"d{n_devices}.npz"
    subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env, check=True, timeout=600)
    return dict(np.load(path))


def test_four_devices_match_one(tmp_path):
    one, four = _run(tmp_path, 1), _run(tmp_path, 4)
    assert int(one.pop("devices")) == 1 and int(four.pop("devices")) == 4
    for key in one:
        assert np.array_equal(one[key], four[key], equal_nan=True), key
