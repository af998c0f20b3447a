"""``gradlab._transfer.host_outputs``: a jitted function's outputs on the host, one copy per dtype."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradlab._transfer import host_outputs
from gradlab.monitor import ParadigmMonitor
from gradlab.monitor._stats import batch_statistics_fn, host_statistics_fn


def _record(x, k):
    """A record of several dtypes, shapes and containers (a None, an empty array, a scalar per dtype)."""
    return {
        "sum": jnp.sum(x),
        "count": jnp.sum(x > 0),
        "positive": x > 0,
        "table": jnp.outer(x, x)[:, :k],
        "nested": (jnp.cumsum(x), None, {"max": jnp.max(x), "argmax": jnp.argmax(x)}),
        "empty": jnp.zeros((0, 3), x.dtype),
        "codes": (x * 7).astype(jnp.int8),
    }


def _assert_same_tree(got, want):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("n", [1, 5, 64])
def test_the_outputs_are_the_leafwise_copies_bit_for_bit(n):
    x = jnp.asarray(np.random.default_rng(n).normal(size=n), jnp.float32)
    fn = lambda x: _record(x, 2)  # noqa: E731
    _assert_same_tree(host_outputs(fn)(x), jax.device_get(jax.jit(fn)(x)))


def test_one_copy_per_dtype(monkeypatch):
    copied = []
    device_get = jax.device_get

    def spy(tree):
        copied.append(len(jax.tree.leaves(tree)))
        return device_get(tree)

    monkeypatch.setattr(jax, "device_get", spy)
    out = host_outputs(lambda x: _record(x, 2))(jnp.arange(4.0))
    # float32, int32 (count, argmax), bool, int8: nine arrays in four copies
    assert len(jax.tree.leaves(out)) == 9
    assert copied == [4]


def test_each_input_shape_gets_its_own_layout():
    f = host_outputs(lambda x: {"row": x[0], "gram": x @ x.T})
    for n in (2, 3, 2):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        out = f(x)
        np.testing.assert_array_equal(out["gram"], x @ x.T)
        np.testing.assert_array_equal(out["row"], x[0])


def test_the_monitors_record_is_the_leafwise_one_bit_for_bit():
    cfg = ParadigmMonitor(trained="infonce", histograms=True).config  # every statistic the monitor has
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(32, 16)), jnp.float32)
    hp = jnp.asarray(rng.normal(size=(32, 16)), jnp.float32)
    _assert_same_tree(host_statistics_fn(cfg)(h, hp), jax.device_get(batch_statistics_fn(cfg)(h, hp)))
