"""gradlab: the GD / W / R gradient paradigm of contrastive and self-supervised losses.

    ∂L_i/∂h_i = GD · Σ_{j≠i} W_j (h_j' − R · h_i')

Import is cheap: submodules (and JAX itself) load on first use of a public name.
"""

from __future__ import annotations

from gradlab._lazy import attach as _attach
from gradlab._version import __version__

# public name -> module that defines it
_LAZY = {
    "get_loss": "gradlab.losses",
    "list_losses": "gradlab.losses",
    "loss_table": "gradlab.losses",
    "Loss": "gradlab.losses",
    "loss_from_cosines": "gradlab.losses",
    "compose": "gradlab.losses",
    "resolve_loss": "gradlab.design",
    "Components": "gradlab.paradigm",
    "Decomposition": "gradlab.paradigm",
    "decompose": "gradlab.paradigm",
    "reconstruct": "gradlab.paradigm",
    "lemma1_bounds": "gradlab.lemma1",
    "enable_cache": "gradlab._cache",
    "disable_cache": "gradlab._cache",
}
_SUBMODULES = {"defaults", "geometry", "losses", "paradigm", "simulate", "lemma1", "margins", "collapse", "monitor", "plot", "io", "outputs", "progress", "compare", "real", "experiments", "design", "figures", "errors", "threads", "backend"}

__all__ = ["__version__", *sorted(_LAZY)]


__getattr__, __dir__ = _attach(__name__, _LAZY, _SUBMODULES)
