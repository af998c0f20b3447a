"""The Monte-Carlo engine of Li et al. 2024 Sec. 3.1 (protocol in App. A.1).

Angles: θ_ii' ~ N(μ_pos, σ_pos²) (one positive) and θ_ij' ~ N(μ_neg, σ_neg²) (N − 1
negatives) per batch, B batches per (μ_pos, μ_neg) cell of a G_pos × G_neg grid.

Every statistic takes a ``Protocol`` (the paper's by default) and returns a
``gradlab.io.Result``; ``loss`` is anything ``gradlab.resolve_loss`` reads (a registry
name, ``compose:...``, ``FILE.py:FUNCTION``, a ``gradlab.Loss``); ``progress`` is
an optional ``callable(done, total)``; the library never prints. The statistics:
``gd_map`` (Figs. 2, 10; ``exact=True`` integrates instead of sampling), ``weight_share``
(Fig. 3) and ``weight_map``, ``ratio_map`` (Fig. 4), ``lemma1_map`` and
``min_ratio_distribution`` (Fig. 8a, simulated). Each function's docstring is its
reference. ``sample_angles`` gives the angles one cell sees; a loss whose registry entry
is ``factored`` (``gradlab.losses.get_spec(name).factored``) takes an exact fast path.

Modes. ``common`` (default): one set of standard-normal draws serves every cell
(batch b uses ``fold_in(fold_in(key(seed), COMMON), b)``); each statistic then factors
into a table per (batch, μ_neg) — the log-sum-exp or the hardest cosine of the
negatives — and a term per (batch, μ_pos), so a map costs O(B·N·G + B·G²).
``independent``: cell ``c = i_pos · G_neg + i_neg`` draws from ``fold_in(key(seed), c)``.
Both are bit-for-bit deterministic from the seed whatever ``chunk`` and the device count.

Laws. ``normal``: the paper's law as given; an angle outside [0, π] is read as the
geometric angle it represents (every statistic sees cos θ). ``reflected``: θ folded
into [0, π] (``geometry.fold_angle``). Because cos(fold θ) = cos θ, the two laws give
the same distribution to every statistic of the geometry; they differ in the sampled
angles themselves (``sample_angles``).
"""

from gradlab.simulate._protocol import Protocol as Protocol
from gradlab.simulate._sampling import sample_angles as sample_angles
from gradlab.simulate._stats import gd_map as gd_map
from gradlab.simulate._stats import lemma1_map as lemma1_map
from gradlab.simulate._stats import min_ratio_distribution as min_ratio_distribution
from gradlab.simulate._stats import ratio_map as ratio_map
from gradlab.simulate._stats import weight_map as weight_map
from gradlab.simulate._stats import weight_share as weight_share

__all__ = [
    "Protocol",
    "gd_map",
    "weight_share",
    "weight_map",
    "ratio_map",
    "lemma1_map",
    "min_ratio_distribution",
    "sample_angles",
]
