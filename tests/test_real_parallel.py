"""Data-parallel training: 4 forced host devices give the loss curve of 1 device.

Each run is its own Python process (the device count is fixed when JAX starts):
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` against no flag. The batch is
sharded over the 4 devices and the loss is computed on the global batch, so the curves
agree to float32 rounding; a loss computed per device (negatives from the local quarter
of the batch only) would not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests._real import require_real_extra

require_real_extra()

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import json, jax, numpy as np
from gradlab.real.light import load_light
from gradlab.real.data import load_news_sentences
from gradlab.real import TrainConfig
from gradlab.real.train import train

enc = load_light(dim=32, seed=0, dropout=0.2)
w0 = np.asarray(enc.params["w"]).copy()
cfg = TrainConfig(loss="infonce", loss_params={"tau": 0.1}, steps=4, batch_size=16, lr=1e-2, eval_every=0,
                  seed=0, dev_pairs=20, eval_test=False, monitor=False)
res = train(cfg, encoder=enc, sentences=load_news_sentences("News100")[:200])
assert np.array_equal(np.asarray(enc.params["w"]), w0), "the encoder's own params changed"
print(json.dumps({"devices": jax.device_count(), "losses": res.losses.tolist(),
                  "w": np.asarray(res.params["w"]).ravel()[:64].tolist(), "best_step": res.best_step}))
"""


def _run(devices: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["JAX_PLATFORMS"] = "cpu"
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    proc = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_four_devices_give_the_one_device_loss_curve():
    one, four = _run(1), _run(4)
    assert one["devices"] == 1 and four["devices"] == 4
    a, b = np.asarray(one["losses"]), np.asarray(four["losses"])
    assert a.shape == b.shape == (4,) and np.all(np.isfinite(a))
    assert a[-1] < a[0]  # it trains
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    if one["best_step"] == four["best_step"] == 4:  # the trained parameters agree too
        np.testing.assert_allclose(four["w"], one["w"], rtol=1e-4, atol=1e-6)
