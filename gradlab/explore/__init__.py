"""The live loss explorer (``gradlab explore``): a loss's paper maps redrawn as its sliders move.

Two layers. The numbers (no dashboard framework, tested without a browser): a ``View`` (the loss,
its parameters, λ and r of Lemma 1, the protocol) and ``view_maps``, which computes its four
panels with ``gradlab.simulate`` exactly as ``gradlab heatmap`` / ``gradlab lemma1`` do
(``view_commands`` prints those commands); ``export_view`` writes a view as PNG + ``.npz`` +
``.json``. The page (the optional ``explore`` extra: Panel, with Bokeh drawing): ``Explorer``
renders in Jupyter and is what ``serve`` serves; ``static_explorer`` writes a standalone page with
the maps precomputed for a few slider values (the docs' home page).

    pip install -e ".[explore]"
    gradlab explore --loss arccon
"""

from __future__ import annotations

from gradlab._lazy import attach as _attach

_LAZY = {
    "View": "gradlab.explore._maps",
    "SliderSpec": "gradlab.explore._maps",
    "PANELS": "gradlab.explore._maps",
    "LIVE": "gradlab.explore._maps",
    "simulable_losses": "gradlab.explore._maps",
    "view_protocol": "gradlab.explore._maps",
    "view_loss": "gradlab.explore._maps",
    "view_maps": "gradlab.explore._maps",
    "panel_results": "gradlab.explore._maps",
    "slider_specs": "gradlab.explore._maps",
    "heatmap_command": "gradlab.explore._maps",
    "lemma1_command": "gradlab.explore._maps",
    "view_commands": "gradlab.explore._maps",
    "export_view": "gradlab.explore._export",
    "require_extra": "gradlab.explore._deps",
    "INSTALL_HINT": "gradlab.explore._deps",
    "Explorer": "gradlab.explore._app",
    "serve": "gradlab.explore._app",
    "static_explorer": "gradlab.explore._static",
    "static_html": "gradlab.explore._static",
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = _attach(__name__, _LAZY)
