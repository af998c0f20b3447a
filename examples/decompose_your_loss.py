"""Write a loss in a notebook, then ask gradlab what its GD / W / R are.

Run: python examples/decompose_your_loss.py
"""

import jax
import jax.numpy as jnp
import numpy as np

import gradlab
from gradlab.geometry import normalize

jax.config.update("jax_enable_x64", True)  # verify in float64: the residual is then ~1e-15

TAU = 0.1


def focal_infonce(h, h_prime, gamma=2.0):
    """A made-up loss: InfoNCE whose per-anchor term is re-weighted by (1 - p_pos)^gamma."""
    h, h_prime = normalize(h), normalize(h_prime)
    logits = h @ h_prime.T / TAU
    log_p = jnp.diag(jax.nn.log_softmax(logits, axis=1))
    return -((1 - jnp.exp(log_p)) ** gamma) * log_p


rng = np.random.default_rng(0)
h = rng.normal(size=(16, 64))
h_prime = h + 0.7 * rng.normal(size=h.shape)

d = gradlab.decompose(focal_infonce, h, h_prime)
print(f"residual (max over anchors): {float(d.residual.max()):.2e}  -> inside the paradigm")
print(f"effective ratio R per anchor: {np.round(np.asarray(d.ratio[:6]), 4)}")

# Compare with InfoNCE at the same temperature: W is still the softmax over negatives,
# only the GD changes (focal re-weighting is a form of gradient dissipation).
ref = gradlab.get_loss("infonce", tau=TAU).components(h, h_prime)
w_mine = np.asarray(d.gd_weight) / np.asarray(d.gd_weight).sum(1, keepdims=True)
w_ref = np.asarray(ref.weight) / np.asarray(ref.weight).sum(1, keepdims=True)
print(f"weight shares equal InfoNCE's: {np.allclose(w_mine, w_ref, atol=1e-6)}")
print(f"GD ratio focal / InfoNCE, first anchors: {np.round(np.asarray(d.gd_weight.sum(1) * TAU / ref.gd)[:6], 4)}")
