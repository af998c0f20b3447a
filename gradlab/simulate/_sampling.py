"""Keys and draws: common random numbers per batch, or independent draws per cell.

Key tree (root = ``jax.random.key(seed)``):

* common mode: batch b uses ``fold_in(fold_in(root, COMMON_TAG), b)``, split into an
  angle key (N standard normals: z[0] for the positive, z[1:] for the negatives) and
  an α key (one uniform on [0, 1)).
* independent mode: cell ``c = i_pos · G_neg + i_neg`` uses ``fold_in(root, c)``, split
  the same way into (B, N) normals and (B,) uniforms.

Draws depend only on the seed and (b or c), never on chunking or devices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.geometry import fold_angle

COMMON_TAG = 0xFFFFFFFF


def root_key(seed: int):
    return jax.random.key(seed)


def _split_draws(key, shape, n, dtype):
    k_angle, k_alpha = jax.random.split(key)
    z = jax.random.normal(k_angle, (*shape, n), dtype)
    u = jax.random.uniform(k_alpha, shape, dtype)
    return z, u


@functools.cache
def _common_draws_fn(batches: int, n: int, dtype: str):
    def one(root, b):
        return _split_draws(jax.random.fold_in(root, b), (), n, dtype)

    @jax.jit
    def draws(seed):
        root = jax.random.fold_in(jax.random.key(seed), COMMON_TAG)
        z, u = jax.vmap(one, in_axes=(None, 0))(root, jnp.arange(batches, dtype=jnp.uint32))
        return z[:, 0], z[:, 1:], u

    return draws


def common_draws(protocol):
    """Standard draws shared by every cell: z_pos (B,), z_neg (B, N−1), u_alpha (B,)."""
    dtype = protocol.jnp_dtype()
    return _common_draws_fn(protocol.batches, protocol.batch_size, dtype.name)(protocol.seed)


def cell_draws(seed_or_root, cell, batches: int, n: int, dtype):
    """Independent-mode draws of one cell (traceable): z_pos (B,), z_neg (B, N−1), u (B,)."""
    root = seed_or_root
    if isinstance(root, (int, np.integer)):
        root = jax.random.key(int(root))
    z, u = _split_draws(jax.random.fold_in(root, cell), (batches,), n, dtype)
    return z[:, 0], z[:, 1:], u


def apply_law(theta, law: str):
    """The sampling law on raw angles μ + σz: ``normal`` as is, ``reflected`` folded into [0, π]."""
    if law == "reflected":
        return fold_angle(theta)
    return theta


def sample_angles(protocol, mu_pos: float, mu_neg: float, *, cell: int = 0):
    """The angles one cell sees under the protocol's mode and law.

    Args:
      protocol: a ``Protocol``.
      mu_pos, mu_neg: the cell's means (radians).
      cell: the flat cell index (independent mode only; ``i_pos · G_neg + i_neg``).

    Returns:
      ``(theta_pos (B,), theta_neg (B, N−1))`` as JAX arrays of the protocol's dtype.
    """
    dtype = protocol.jnp_dtype()
    if protocol.mode == "common":
        z_pos, z_neg, _ = common_draws(protocol)
    else:
        z_pos, z_neg, _ = cell_draws(protocol.seed, cell, protocol.batches, protocol.batch_size, dtype)
    theta_pos = jnp.asarray(mu_pos, dtype) + jnp.asarray(protocol.sigma_pos, dtype) * z_pos
    theta_neg = jnp.asarray(mu_neg, dtype) + jnp.asarray(protocol.sigma_neg, dtype) * z_neg
    return apply_law(theta_pos, protocol.law), apply_law(theta_neg, protocol.law)
