"""``gradlab.backend``: whose choices a trace makes, the override, and what it invalidates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gradlab import _cache, backend


def test_current_is_jaxs_default_backend_unless_overridden():
    real = jax.default_backend()
    assert backend.current() == real
    with backend.choices_for("gpu") as name:
        assert name == "gpu" and backend.current() == "gpu"
        with backend.choices_for("tpu"):
            assert backend.current() == "tpu"
        assert backend.current() == "gpu"
    assert backend.current() == real


def test_the_override_ends_when_its_block_raises():
    with pytest.raises(RuntimeError, match="inside"):
        with backend.choices_for("gpu"):
            raise RuntimeError("inside")
    assert backend.current() == jax.default_backend()


@pytest.mark.parametrize("name", ["cuda", "GPU", "", None])
def test_an_unknown_backend_is_a_one_line_error(name):
    with pytest.raises(ValueError, match=r"^backend must be one of cpu, gpu, tpu; got ") as err:
        with backend.choices_for(name):
            pass
    assert "\n" not in str(err.value)
    assert backend.current() == jax.default_backend()


def test_a_function_jitted_before_the_block_is_traced_again_inside_and_after():
    """A choice is read while tracing: without clearing JAX's caches, the trace made outside would
    serve the call inside (and the one inside the calls after)."""
    traces = []

    @jax.jit
    def f(x):
        traces.append(backend.current())
        return x + (1.0 if backend.current() == "gpu" else 0.0)

    x = jnp.zeros(3)
    outside = float(f(x)[0])
    with backend.choices_for("gpu"):
        inside = float(f(x)[0])
    after = float(f(x)[0])
    assert (outside, inside, after) == (0.0, 1.0, 0.0)
    assert traces == [jax.default_backend(), "gpu", jax.default_backend()]


def test_the_program_store_keys_a_program_by_the_backend_it_was_traced_for(tmp_path):
    """A program traced with another backend's choices is another entry of the store: a process
    with this backend's choices never reads it back."""
    args = (np.zeros(4, np.float32),)
    here = _cache._entry(tmp_path, ("stage", 1), args, "program")
    with backend.choices_for("gpu"):
        there = _cache._entry(tmp_path, ("stage", 1), args, "program")
    assert here != there
    assert _cache._entry(tmp_path, ("stage", 1), args, "program") == here
