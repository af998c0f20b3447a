"""Data-parallel training: forced host devices give the loss curve of 1 device.

Each run is its own Python process (the device count is fixed when JAX starts):
``XLA_FLAGS=--xla_force_host_platform_device_count=K`` against no flag. The batch is
sharded over the K devices and the loss is computed on the global batch, so the curves
agree to float32 rounding; a loss computed per device (negatives from the local part
of the batch only) would not. The light encoder runs on 4 devices; SimCSE's recipe
(Gao et al. 2021: packed batches, the MLP over [CLS]) on the tiny BERT on 2, in float32
and in bf16 mixed precision.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests._real import require_real_extra
from tests._xla import xla_flags

require_real_extra()

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import json, jax, numpy as np
from gradlab.real.light import load_light
from gradlab.real.data import load_news_sentences
from gradlab.real import TrainConfig
from gradlab.real.trainer import train

enc = load_light(dim=32, seed=0, dropout=0.2)
w0 = np.asarray(enc.params["w"]).copy()
cfg = TrainConfig(loss="infonce", loss_params={"tau": 0.1}, steps=4, batch_size=16, lr=1e-2, eval_every=0,
                  seed=0, dev_pairs=20, eval_test=False, monitor=False)
res = train(cfg, encoder=enc, sentences=load_news_sentences("News100")[:200])
assert np.array_equal(np.asarray(enc.params["w"]), w0), "the encoder's own params changed"
print(json.dumps({"devices": jax.device_count(), "losses": res.losses.tolist(),
                  "w": np.asarray(res.params["w"]).ravel()[:64].tolist(), "best_step": res.best_step}))
"""


def _run(devices: int, script: str = RUN, *args: str) -> dict:
    env = {**os.environ, "XLA_FLAGS": xla_flags(devices), "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", script, *map(str, args)], capture_output=True, text=True, env=env, timeout=600,
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


RECIPE = """
import json, sys, jax, numpy as np
from gradlab.real import simcse_unsup_config
from gradlab.real.state import state_path
from gradlab.real.trainer import train

model, corpus, out, precision = sys.argv[1:]
cfg = simcse_unsup_config(model, corpus, batch_size=8, steps=4, lr=1e-3, eval_every=0, dev_pairs=20,
                          eval_test=False, monitor=precision == "bf16", save_state_every=4, precision=precision)
res = train(cfg, out_dir=out)
with np.load(state_path(out)) as z:  # the parameters after the last step, whichever was best
    assert json.loads(str(z["meta"]))["step"] == 4
print(json.dumps({"devices": jax.device_count(), "losses": res.losses.tolist(), "monitor": res.monitor}))
"""


def _recipe(devices: int, tmp_path: Path, precision: str = "float32") -> tuple[dict, dict]:
    from tests._real import HF_FIXTURES, TINY_SENTENCES

    corpus = tmp_path / "wiki.txt"
    corpus.write_text("\n".join(TINY_SENTENCES) + "\n")
    out = tmp_path / f"run-{devices}-{precision}"
    res = _run(devices, RECIPE, HF_FIXTURES / "bert", corpus, out, precision)
    with np.load(out / "state" / "state.npz") as z:
        params = {k: z[k] for k in z.files if k.startswith("params/")}
    return res, params


def test_simcse_recipe_on_two_devices_gives_the_one_device_run(tmp_path):
    (one, p1), (two, p2) = _recipe(1, tmp_path), _recipe(2, tmp_path)
    assert one["devices"] == 1 and two["devices"] == 2
    a, b = np.asarray(one["losses"]), np.asarray(two["losses"])
    assert a.shape == b.shape == (4,) and np.all(np.isfinite(a))
    np.testing.assert_allclose(b, a, rtol=2e-5, atol=1e-6)
    assert sorted(p1) == sorted(p2) and "params/pooler/w" in p1  # the MLP is trained, on both
    # The parameters after step 4, all but the attention's key bias: its gradient is zero in
    # exact arithmetic (q · b_k is the same for every key of a query, and softmax ignores a
    # shift), so it is rounding noise, which Adam's normalized step turns into moves of ~lr.
    for k in sorted(set(p1) - {"params/layers/k_b"}):
        np.testing.assert_allclose(p2[k], p1[k], rtol=1e-4, atol=1e-6, err_msg=k)
    assert not np.allclose(p1["params/pooler/w"], _initial_pooler())  # they moved
    # bf16 mixed precision on the same 2 devices: float32 master parameters, a finite curve
    # near the float32 one, and float32 views for the monitor
    (half, p16) = _recipe(2, tmp_path, "bf16")
    assert half["devices"] == 2 and half["monitor"] == "attached"
    c = np.asarray(half["losses"])
    assert np.all(np.isfinite(c)) and not np.array_equal(c, b)
    np.testing.assert_allclose(c, b, rtol=5e-2)
    assert {str(v.dtype) for v in p16.values()} == {"float32"}
    records = [json.loads(line) for line in (tmp_path / "run-2-bf16" / "paradigm_monitor.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 4]


def _initial_pooler() -> np.ndarray:
    from safetensors.numpy import load_file

    from tests._real import HF_FIXTURES

    return load_file(HF_FIXTURES / "bert" / "model.safetensors")["pooler.dense.weight"].T
