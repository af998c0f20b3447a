"""Lemma 1 on real embeddings: the minimum ratio r_low per anchor and its distribution per λ.

For each anchor h_i of two views (h, h'), the hardest negative is the h_j' (j ≠ i) with the
largest cosine; α is the angle between the planes O h_i h_i' and O h_i h_j', i.e. between
the tangential parts of h_i' and h_j' at h_i. ``gradlab.lemma1_bounds`` gives r_low.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gradlab_cli._common import fail


def load_views(path: Path):
    """Read ``h`` and ``h_prime`` (N, D) from an .npz; one-line errors for anything unreadable."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            keys = set(data.files)
            if not {"h", "h_prime"} <= keys:
                raise fail(f"embeddings file {str(path)!r} must hold arrays 'h' and 'h_prime'; found {sorted(keys)}")
            h, hp = np.asarray(data["h"], float), np.asarray(data["h_prime"], float)
    except OSError as exc:
        raise fail(f"cannot read embeddings file {str(path)!r}: {exc.strerror or exc}") from None
    except (ValueError, EOFError) as exc:
        raise fail(f"cannot read embeddings file {str(path)!r}: not a valid .npz ({exc})") from None
    if h.ndim != 2 or h.shape != hp.shape:
        raise fail(f"embeddings 'h' and 'h_prime' must both have shape (N, D); got {h.shape} and {hp.shape}")
    if h.shape[0] < 2:
        raise fail(f"embeddings need N >= 2 pairs; got N = {h.shape[0]}")
    if not (np.all(np.isfinite(h)) and np.all(np.isfinite(hp))):
        raise fail("embeddings contain non-finite values")
    return h, hp


def min_ratio_samples(h, hp, lams, batch_size: int = 128):
    """r_low (len(lams), N) per anchor, hardest negative within its batch of ``batch_size``; NaN if infeasible."""
    import jax.numpy as jnp

    from gradlab.lemma1 import lemma1_bounds

    h = h / np.linalg.norm(h, axis=1, keepdims=True)
    hp = hp / np.linalg.norm(hp, axis=1, keepdims=True)
    out = []
    for start in range(0, h.shape[0], batch_size):
        a, b = h[start:start + batch_size], hp[start:start + batch_size]
        n = a.shape[0]
        if n < 2:
            continue
        c = a @ b.T
        c_pos = np.clip(np.diag(c), -1, 1)
        c_off = np.where(np.eye(n, dtype=bool), -np.inf, c)
        j = np.argmax(c_off, axis=1)
        c_neg = np.clip(c[np.arange(n), j], -1, 1)
        u = b - c_pos[:, None] * a
        v = b[j] - c_neg[:, None] * a
        nu, nv = np.linalg.norm(u, axis=1), np.linalg.norm(v, axis=1)
        cos_alpha = np.where((nu > 0) & (nv > 0), np.sum(u * v, axis=1) / np.maximum(nu * nv, 1e-300), 1.0)
        alpha = np.arccos(np.clip(cos_alpha, -1, 1))
        low, _, feas = lemma1_bounds(jnp.asarray(np.arccos(c_pos))[None], jnp.asarray(np.arccos(c_neg))[None],
                                     jnp.asarray(alpha)[None], jnp.asarray(lams, float)[:, None])
        out.append(np.where(np.asarray(feas), np.asarray(low), np.nan))
    return np.concatenate(out, axis=1)


def min_ratio_from_embeddings(h, hp, *, lams, bins=None, quantiles=(0.05, 0.25, 0.5, 0.75, 0.95)):
    """A ``Result`` shaped like ``simulate.min_ratio_distribution``'s, from real embeddings."""
    from gradlab.io import Result, runtime_meta

    lams = np.asarray(lams, float)
    edges = np.linspace(-2.0, 4.0, 61) if bins is None else np.asarray(bins, float)
    s = min_ratio_samples(h, hp, lams)
    feas = ~np.isnan(s)
    n = feas.sum(axis=1)
    qs = np.asarray(quantiles, float)
    pick = [s[k][feas[k]] for k in range(lams.size)]
    mean = np.array([x.mean() if x.size else np.nan for x in pick])
    se = np.array([x.std(ddof=1) / np.sqrt(x.size) if x.size > 1 else np.nan for x in pick])
    hist = np.stack([np.histogram(x, bins=edges)[0] for x in pick]).astype(float)
    density = np.where(n[:, None] > 0, hist / np.maximum(n, 1)[:, None] / np.diff(edges), np.nan)
    extra = {
        "feasible": feas.mean(axis=1),
        "histogram": density,
        "bin_edges": edges,
        "quantiles": np.stack([np.quantile(x, qs) if x.size else np.full(qs.shape, np.nan) for x in pick]),
        "below": np.array([(x < edges[0]).mean() if x.size else np.nan for x in pick]),
        "above": np.array([(x > edges[-1]).mean() if x.size else np.nan for x in pick]),
    }
    return Result(dims=("lam",), coords={"lam": lams, "q": qs}, mean=mean, stderr=se, mask=n == 0, extra=extra,
                  extra_dims={"feasible": ("lam",), "histogram": ("lam", "bin"), "quantiles": ("lam", "q")},
                  meta={"statistic": "min_ratio_distribution", "source": "embeddings", "n_anchors": int(h.shape[0]),
                        **runtime_meta()})
