"""A sharded global batch: the monitor's numbers equal the unsharded ones, and no N × N matrix is formed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tests._xla import xla_flags

CFG = dict(losses=("infonce", "mat"), ratio_losses=("arccon",), taus=(0.05,), lambdas=(0.5,),
           histograms=True, hist_bins=16)

SCRIPT = textwrap.dedent(
    """
    import json, sys, jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from gradlab.monitor import ParadigmMonitor, analyze

    cfg = json.loads(sys.argv[2])
    n, d = 384, 24
    rng = np.random.default_rng(0)
    h = rng.normal(size=(n, d)); hp = h + 0.6 * rng.normal(size=(n, d))
    mesh = Mesh(np.array(jax.devices()), ("data",))
    rows = NamedSharding(mesh, P("data", None))
    hs, hps = jax.device_put(h, rows), jax.device_put(hp, rows)
    assert len(hs.sharding.device_set) == len(jax.devices())
    out = {"devices": len(jax.devices())}
    for dtype in sys.argv[3].split(","):
        out[dtype] = {}
        for name, x, xp in (("unsharded", h, hp), ("sharded", hs, hps)):
            mon = ParadigmMonitor(**cfg, dtype=dtype, block=96, rankme_window=n)
            mon.update(0, x, xp)  # completes the RankMe window
            mon.close()  # waits for it
            out[dtype][name] = mon.update(1, x, xp)
    res = analyze(hs, hps, batch_size=n, **cfg, block=96, dtype="float64", rankme_window=n)
    out["analyze_mu_neg"] = float(res["mu_neg"][0])
    out["analyze_hardest"] = float(res["hardest_share"]["0.05"][0])
    # the compiled statistics of the sharded batch: no (N, N) array anywhere
    hlo = mon._fn.lower(hs, hps).compile().as_text()
    out["nn_in_hlo"] = f"[{n},{n}]" in hlo
    with open(sys.argv[1], "w") as f:
        json.dump(out, f)
    """
)


def _leaves(rec, prefix=""):
    """The numeric leaves of a record; ``losses`` (which loss stands behind each key) is compared as it is."""
    for k, v in rec.items():
        if not prefix and k == "losses":
            continue
        if isinstance(v, dict):
            yield from _leaves(v, f"{prefix}{k}/")
        elif k not in ("time", "update_s"):
            yield prefix + k, v


def _run(tmp_path, dtypes):
    import json

    env = {**os.environ, "XLA_FLAGS": xla_flags(4), "JAX_PLATFORMS": "cpu",
           "PYTHONPATH": os.getcwd()}
    path = tmp_path / "out.json"
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in CFG.items()}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(path), json.dumps(cfg), ",".join(dtypes)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(path.read_text())


def _check(out, dtypes):
    assert out["devices"] == 4
    assert not out["nn_in_hlo"]
    for dtype, rtol in (("float64", 1e-12), ("float32", 2e-5)):
        if dtype not in dtypes:
            continue
        a, b = dict(_leaves(out[dtype]["unsharded"])), dict(_leaves(out[dtype]["sharded"]))
        assert a.keys() == b.keys() and out[dtype]["unsharded"]["losses"] == out[dtype]["sharded"]["losses"]
        assert a["valid"] and b["valid"] and a["rankme_rows"] == 384
        for key in a:
            x = np.asarray(a[key], dtype=float)
            y = np.asarray(b[key], dtype=float)
            # float32 quantiles / histograms may move one value across a threshold by rounding
            if dtype == "float32" and key.startswith("histograms/"):
                assert abs(x.sum() - y.sum()) < 1e-9 and np.abs(x - y).sum() <= 4, key
                continue
            np.testing.assert_allclose(y, x, rtol=rtol, atol=rtol * 1e-2, err_msg=key)
    f64 = out["float64"]["unsharded"]
    assert out["analyze_mu_neg"] == pytest.approx(f64["mu_neg"], rel=1e-12)
    assert out["analyze_hardest"] == pytest.approx(f64["hardest_share"]["0.05"], rel=1e-12)


def test_sharded_batch_equals_unsharded_four_devices(tmp_path):
    _check(_run(tmp_path, ("float64",)), ("float64",))


@pytest.mark.slow
def test_sharded_batch_equals_unsharded_four_devices_float32(tmp_path):
    _check(_run(tmp_path, ("float64", "float32")), ("float64", "float32"))


def test_row_blocks_form_no_n_by_n_matrix():
    """One device: the compiled statistics with several row blocks hold no (N, N) array."""
    import jax

    # private on purpose: the compiled per-batch statistics are sharded directly
    from gradlab.monitor._monitor import make_config
    from gradlab.monitor._stats import batch_statistics_fn

    n, d = 96, 8
    cfg = make_config(losses=("infonce", "mat"), taus=(0.05,), lambdas=(0.5,), histograms=True, block=32)
    shape = jax.ShapeDtypeStruct((n, d), np.float32)
    hlo = batch_statistics_fn(cfg).lower(shape, shape).compile().as_text()
    assert f"[{n},{n}]" not in hlo and f"[32,{n}]" in hlo
    one_block = make_config(losses=("infonce",), taus=(0.05,), lambdas=(0.5,), block=n)
    assert f"[{n},{n}]" in batch_statistics_fn(one_block).lower(shape, shape).compile().as_text()  # the check sees it


@pytest.mark.x64
def test_gram_path_and_row_block_path_agree():
    """One block with N <= D goes through the keys' Gram matrix, several blocks through Σ_j w_ij h_j': same numbers."""
    from gradlab.monitor import ParadigmMonitor

    rng = np.random.default_rng(7)
    n, d = 48, 64
    h = rng.normal(size=(n, d)).astype(np.float32)
    hp = (h + 0.8 * rng.normal(size=(n, d))).astype(np.float32)
    cfg = dict(losses=("infonce", "met"), ratio_losses=("mat",), taus=(0.3, 0.01), lambdas=(0.5,), histograms=True,
               hist_bins=12, rankme_window=None)
    one = ParadigmMonitor(**cfg, dtype=np.float64, block=n).update(0, h, hp)  # float64 (the x64 mark)
    many = ParadigmMonitor(**cfg, dtype=np.float64, block=10).update(0, h, hp)
    a, b = dict(_leaves(one)), dict(_leaves(many))
    assert a.keys() == b.keys() and one["losses"] == many["losses"]
    for key in a:
        np.testing.assert_allclose(np.asarray(b[key], float), np.asarray(a[key], float), rtol=1e-12, atol=1e-14,
                                   err_msg=key)
