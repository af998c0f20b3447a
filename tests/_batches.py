"""Random two-view batches shared by the loss tests."""

import numpy as np


def batch(n, d, seed, noise=1.0, dtype=np.float64):
    """(h, h_prime) of shape (n, d): h standard normal, h_prime = h + noise · normal."""
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    hp = h + noise * rng.normal(size=(n, d))
    return h.astype(dtype), hp.astype(dtype)
