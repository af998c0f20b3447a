"""Dimensional-collapse metrics: RankMe, the std of l2-normalized embeddings, α-ReQ.

- ``rankme`` (Garrido et al. 2023): with σ_1 ≥ … ≥ σ_m the singular values of the
  embedding matrix Z (W, D) *as given* (not normalized, not centered), m = min(W, D),

      p_k = σ_k / Σ_l σ_l + ε,        RankMe(Z) = exp(−Σ_k p_k log p_k),

  with ε = 1e-7 (the paper's). A rank-k matrix with k equal singular values gives
  RankMe = exp(−k (1/k + ε) log(1/k + ε) − (m − k) ε log ε) ≈ k.
- ``embedding_std``: the mean over the D dimensions of the standard deviation (ddof = 1)
  of the l2-normalized rows; about 1/√D for isotropic embeddings, 0 at complete collapse
  (the collapse indicator of SimSiam, Chen & He 2021, as the lightly library ships it).
- ``alpha_req`` (Agrawal et al. 2022): the power-law exponent α of the eigenspectrum of
  the (centered, ddof = 1) covariance of Z, λ_k ∝ k^(−α), fitted by least squares of
  log λ_k on log k over the ranks k = 1 … K, K = min(D, W − 1) (every eigenvalue a
  generic window has). α is NaN where an eigenvalue in that range is not > 0.

The singular values and eigenvalues come from the D × D Gram matrix ZᵀZ accumulated in
float64 (the products of float32 inputs are exact there), so their absolute error is
about 1e-16 · λ_max: far below ε for RankMe.

``CollapseWindow`` keeps the rows RankMe and α-ReQ need across batches in a fixed
buffer (memory W · D floats): tumbling windows of W consecutive rows of the anchors h.
"""

from __future__ import annotations

import numpy as np

from gradlab import defaults

__all__ = ["RANKME_EPS", "DEFAULT_WINDOW", "WINDOW_KEYS", "rankme", "alpha_req", "embedding_std", "CollapseWindow"]

RANKME_EPS = defaults.RANKME_EPS
DEFAULT_WINDOW = defaults.RANKME_WINDOW


def _matrix(z, name="z") -> np.ndarray:
    z = np.asarray(z)
    if z.ndim != 2 or z.shape[0] < 2 or z.shape[1] < 1:
        raise ValueError(f"{name} must have shape (W, D) with W >= 2 and D >= 1; got {z.shape}")
    return z


def _spectra(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Singular values of z (descending) and eigenvalues of its centered covariance (descending)."""
    z = np.asarray(z, dtype=np.float64)
    w = z.shape[0]
    gram = z.T @ z
    mean = z.mean(axis=0)
    cov = (gram - w * np.outer(mean, mean)) / (w - 1)
    sv = np.sqrt(np.clip(np.linalg.eigvalsh(gram)[::-1], 0.0, None))[: min(z.shape)]
    return sv, np.linalg.eigvalsh(cov)[::-1]


def _rankme_from_sv(sv: np.ndarray, eps: float) -> float:
    total = float(np.sum(sv))
    if not total > 0:
        return float("nan")
    p = sv / total + eps
    return float(np.exp(-np.sum(p * np.log(p))))


def _alpha_from_eigs(eigs: np.ndarray, w: int) -> float:
    k = min(eigs.shape[0], w - 1)
    lam = eigs[:k]
    if k < 2 or not np.all(lam > 0):
        return float("nan")
    x = np.log(np.arange(1, k + 1, dtype=np.float64))
    slope = np.polyfit(x, np.log(lam), 1)[0]
    return float(-slope)


def rankme(z, *, eps: float = RANKME_EPS) -> float:
    """RankMe (Garrido et al. 2023) of an embedding matrix, as given.

    Args:
      z: (W, D) embeddings (rows), not normalized by this function.
      eps: the ε added to each normalized singular value.

    Returns:
      exp of the entropy of p_k = σ_k / Σσ + ε, a float in about [1, min(W, D)].

    Examples:
      >>> import numpy as np
      >>> round(rankme(np.eye(4)[[0, 1, 2, 0, 1, 2]]), 4)  # rank 3, equal singular values
      3.0
    """
    z = _matrix(z)
    return _rankme_from_sv(_spectra(z)[0], float(eps))


def alpha_req(z) -> float:
    """α-ReQ (Agrawal et al. 2022): power-law decay exponent of the covariance eigenspectrum.

    Least-squares slope of log λ_k against log k over k = 1 … min(D, W − 1), negated.

    Args:
      z: (W, D) embeddings (rows); the covariance is centered, ddof = 1.

    Returns:
      α (float); NaN if an eigenvalue in the fit range is not positive.

    Examples:
      >>> import numpy as np
      >>> x = np.random.default_rng(0).normal(size=(64, 8))
      >>> q, _ = np.linalg.qr(x - x.mean(axis=0))  # orthonormal, centered columns
      >>> round(alpha_req(q * np.arange(1, 9) ** -1.0), 6)  # covariance eigenvalues ∝ k^-2
      2.0
    """
    z = _matrix(z)
    return _alpha_from_eigs(_spectra(z)[1], z.shape[0])


def embedding_std(z):
    """Mean over dimensions of the std (ddof = 1) of the l2-normalized rows (jit-friendly).

    Args:
      z: (N, D) rows, l2-normalized by the caller.

    Returns:
      a scalar: about 1/√D for isotropic rows, 0 when every row is the same.

    Examples:
      >>> import jax.numpy as jnp
      >>> float(embedding_std(jnp.ones((4, 3)) / jnp.sqrt(3.0)))
      0.0
    """
    import jax.numpy as jnp

    return jnp.mean(jnp.std(z, axis=0, ddof=1))


#: The keys ``CollapseWindow.add`` returns (and a monitor record carries).
WINDOW_KEYS = ("rankme", "alpha_req", "rankme_rows", "rankme_step")
_EMPTY = dict.fromkeys(WINDOW_KEYS)


def _window_values(z: np.ndarray, eps: float, step) -> dict:
    sv, eigs = _spectra(z)
    return {"rankme": _rankme_from_sv(sv, eps), "alpha_req": _alpha_from_eigs(eigs, z.shape[0]),
            "rankme_rows": int(z.shape[0]), "rankme_step": step}


class CollapseWindow:
    """Tumbling windows of W consecutive anchor rows, for RankMe and α-ReQ.

    ``add(h)`` appends a batch's rows; each time W rows are complete, RankMe and α-ReQ
    of that window are computed and the buffer starts over. A batch of at least W
    rows is a window by itself (its last W rows). Memory: one (W, D) float32 buffer
    (two while a window is being computed in the background).

    The window's spectra cost O(W D²) (about 0.3 s for W = 4096, D = 768 on an idle
    CPU; seconds on a loaded one). With ``background=True`` they are computed on a
    worker thread (NumPy's LAPACK releases the GIL) while training goes on, and the
    first ``add`` that finds them done returns them; ``add`` never waits: a window
    completed while the previous one is still being computed is skipped (counted in
    ``skipped``), so RankMe's cadence adapts to the CPU left over. ``add(..., wait=True)``
    (a run's last batch) waits for the window in flight and computes a window it completes
    at once, so that its values are every window's so far; ``close`` waits for the window in
    flight. ``rankme_step`` names the step of the ``add`` that completed the window, so the
    values are exact and placed exactly, whenever they arrive. Otherwise (the default) the
    ``add`` that completes a window computes them itself.

    Args:
      rows: the window size W (>= 2).
      eps: RankMe's ε.
      background: compute the spectra on a worker thread.
    """

    def __init__(self, rows: int = DEFAULT_WINDOW, *, eps: float = RANKME_EPS, background: bool = False):
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 2:
            raise ValueError(f"rankme_window must be an integer >= 2 rows; got {rows!r}")
        self.rows = int(rows)
        self.eps = float(eps)
        self.background = bool(background)
        self._buf = None
        self._fill = 0
        self._pending = None
        self._pool = None
        self.skipped = 0
        self.value = dict(_EMPTY)

    def _finish(self, z, step, wait: bool) -> None:
        if not self.background or wait:  # (a window in flight was collected first: add's wait)
            self.value = _window_values(z, self.eps, step)
            return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gradlab-rankme")
        if self._pending is not None:  # at most one window in flight; never wait for it here
            self.skipped += 1
            return
        self._pending = self._pool.submit(_window_values, np.array(z, copy=True), self.eps, step)

    def _collect(self, *, wait: bool) -> None:
        if self._pending is not None and (wait or self._pending.done()):
            pending, self._pending = self._pending, None
            self.value = pending.result()

    def add(self, h, step=None, *, wait: bool = False) -> dict:
        """Append the rows of ``h`` (N, D; host or device array); return the latest window's values.

        Args:
          h: the batch's anchors, as given.
          step: the training step, reported as ``rankme_step`` of a window this batch completes.
          wait: wait for a window in flight, and compute a window this batch completes now (with
            ``background``: a run's last batch, whose record then carries every window).

        Returns:
          ``{"rankme", "alpha_req", "rankme_rows", "rankme_step"}`` of the latest window
          whose values are in (all ``None`` before the first).
        """
        self._collect(wait=wait)
        n, d = h.shape
        if self._buf is not None and self._buf.shape[1] != d:
            self._buf, self._fill = None, 0  # the embedding width changed: start over
        if n >= self.rows:
            self._finish(np.asarray(h[n - self.rows:], dtype=np.float32), step, wait)
            self._fill = 0
            return dict(self.value)
        if self._buf is None:
            self._buf = np.empty((self.rows, d), dtype=np.float32)
        h = np.asarray(h, dtype=np.float32)
        take = min(n, self.rows - self._fill)
        self._buf[self._fill:self._fill + take] = h[:take]
        self._fill += take
        if self._fill == self.rows:
            self._finish(self._buf, step, wait)
            rest = n - take
            self._buf[:rest] = h[take:]
            self._fill = rest
        return dict(self.value)

    def close(self) -> None:
        """Wait for a window in flight (its values become ``value``) and stop the worker thread."""
        self._collect(wait=True)
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
