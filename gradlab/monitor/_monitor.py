"""``ParadigmMonitor``: the training hook, and ``analyze``: the same statistics offline."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Iterable, Sequence

import numpy as np

from gradlab import defaults
from gradlab._memory import check_pairwise
from gradlab.monitor._collapse import DEFAULT_WINDOW, WINDOW_KEYS, CollapseWindow
from gradlab.monitor._convert import InputError, to_array
from gradlab.monitor._sinks import make_sink
from gradlab.monitor._stats import LossEntry, StatsConfig, batch_statistics_fn, host_statistics_fn

__all__ = [
    "ParadigmMonitor",
    "analyze",
    "min_ratio_distribution",
    "DEFAULT_LOSSES",
    "DEFAULT_RATIO_LOSSES",
    "DEFAULT_TAUS",
    "DEFAULT_LAMBDAS",
    "STATISTICS",
    "analysis_records",
]

DEFAULT_LOSSES = defaults.MONITOR_LOSSES
DEFAULT_RATIO_LOSSES = defaults.MONITOR_RATIO_LOSSES
DEFAULT_TAUS = defaults.TAUS
DEFAULT_LAMBDAS = defaults.MONITOR_LAMS

#: The statistics of a record, in the papers' names (nested ones are keyed by loss / τ / λ).
STATISTICS = (
    "mu_pos", "sigma_pos", "mu_neg", "sigma_neg", "cos_pos_mean", "cos_neg_mean", "distance_gap",
    "gd_mean", "gd_off_fraction", "ratio", "ratio_pass_fraction", "hardest_share", "weight_share",
    "lemma1_min_ratio", "lemma1_feasible_fraction", "lemma1_satisfied_fraction",
    "align", "uniform", "m_o", "m_r", "embedding_std", "rankme", "alpha_req", "rankme_rows", "rankme_step",
)


class MonitorInputError(ValueError):
    """Raised by a ``strict=True`` monitor on bad input (the reason a lenient one records)."""


def _loss_entries(losses) -> tuple[LossEntry, ...]:
    from gradlab.design import resolve_loss
    from gradlab.losses import Loss, offdiag_kernel

    if isinstance(losses, (str, Loss)):
        losses = (losses,)
    entries, seen = [], set()
    for item in losses:
        loss = resolve_loss(item)
        if not isinstance(loss, Loss):
            raise TypeError(f"losses must name gradlab Loss objects; {item!r} is a {type(loss).__name__}")
        spec = loss.spec
        if spec.kind != "cosine" or spec.negatives != "h_prime":
            raise ValueError(
                f"the monitor needs per-anchor cosine-family losses (negatives h_j'); {spec.name!r} is not one"
            )
        if spec.name in seen:
            raise ValueError(f"loss {spec.name!r} is listed twice: statistics are keyed by loss name")
        seen.add(spec.name)
        # any cosine-kind loss (registered, gradlab.loss_from_cosines, gradlab.compose): its kernel
        # sees the N − 1 off-diagonal negatives, W comes back (N, N) with a zero diagonal
        entries.append(LossEntry(spec.name, offdiag_kernel(spec.kernel), tuple(loss.params.items()), loss))
    return tuple(entries)


def _trained_entry(loss) -> LossEntry | None:
    """The loss being trained as the monitor's ``"trained"`` entry (any kind; a transform by its surrogate)."""
    if loss is None:
        return None
    from gradlab.design import resolve_loss
    from gradlab.losses import GradientTransform, offdiag_kernel

    about = None
    if isinstance(loss, GradientTransform):
        numbers = {k: float(v) for k, v in loss.params.items() if isinstance(v, (int, float))}
        about = (f"transform:{loss.name}", (("tau", float(loss.tau)), ("beta", float(loss.beta)), *numbers.items()))
        loss = loss.as_loss()
    else:
        loss = resolve_loss(loss)
    spec = loss.spec
    kernel = offdiag_kernel(spec.kernel) if spec.kind == "cosine" and spec.negatives == "h_prime" else None
    return LossEntry("trained", kernel, tuple(loss.params.items()), loss, about)


def _describe(entry: LossEntry) -> dict:
    name, params = entry.about or (entry.loss.name if entry.loss is not None else entry.key, entry.params)
    return {"loss": name, "params": {k: float(v) for k, v in params}}


def monitored_losses(cfg: StatsConfig) -> dict:
    """Which loss, with which parameters, stands behind each key of a record's per-loss statistics.

    ``"trained"`` is the loss being trained (with the run's parameters); the comparison
    losses keep their documented defaults under their own names; ``"baseline"`` is the GD
    gate 1[c_p − max_{j≠i} c_ij < m] of Li et al. 2024 Eq. 5 with the monitor's ``margin``.
    """
    table = {}
    if cfg.trained is not None:
        table["trained"] = _describe(cfg.trained)
    for e in (*cfg.losses, *cfg.ratio_losses):
        table.setdefault(e.key, _describe(e))
    if cfg.margin is not None:
        table["baseline"] = {"loss": "baseline GD gate (Li et al. 2024 Eq. 5)", "params": {"m": cfg.margin}}
    return table


def _positive_tuple(values, name: str) -> tuple[float, ...]:
    if isinstance(values, (int, float)):
        values = (values,)
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must hold real numbers; got {v!r}")
        v = float(v)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"every {name[:-1]} must be a finite number > 0; got {v!r}")
        out.append(v)
    if len(set(out)) != len(out):
        raise ValueError(f"{name} has duplicates: {out}")
    return tuple(out)


def make_config(
    *,
    losses=DEFAULT_LOSSES,
    ratio_losses=DEFAULT_RATIO_LOSSES,
    taus=DEFAULT_TAUS,
    lambdas=DEFAULT_LAMBDAS,
    margin: float | None = 0.3,
    gd_threshold: float = 0.01,
    static_ratio: float = 1.0,
    histograms: bool = False,
    hist_bins: int = 50,
    block: int = 256,
    trained=None,
) -> StatsConfig:
    """Validate the user-facing options into a hashable ``StatsConfig``."""
    if margin is not None and not (isinstance(margin, (int, float)) and math.isfinite(margin) and margin >= 0):
        raise ValueError(f"margin must be a finite number >= 0 or None; got {margin!r}")
    if not (isinstance(gd_threshold, (int, float)) and 0 < gd_threshold <= 1):
        raise ValueError(f"gd_threshold must lie in (0, 1]; got {gd_threshold!r}")
    if not (isinstance(static_ratio, (int, float)) and math.isfinite(static_ratio)):
        raise ValueError(f"static_ratio must be a finite number; got {static_ratio!r}")
    if histograms and not (isinstance(hist_bins, int) and hist_bins >= 1):
        raise ValueError(f"hist_bins must be a positive integer; got {hist_bins!r}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be an integer >= 1 (anchors per row block); got {block!r}")
    return StatsConfig(
        losses=_loss_entries(losses),
        ratio_losses=_loss_entries(ratio_losses),
        trained=_trained_entry(trained),
        taus=_positive_tuple(taus, "taus"),
        lambdas=_positive_tuple(lambdas, "lambdas"),
        margin=None if margin is None else float(margin),
        gd_threshold=float(gd_threshold),
        static_ratio=float(static_ratio),
        hist_bins=int(hist_bins) if histograms else None,
        block=block,
    )


def _to_python(x):
    if isinstance(x, dict):
        return {k: _to_python(v) for k, v in x.items()}
    a = np.asarray(x)
    if a.ndim == 0:
        v = a.item()
        if isinstance(v, float) and not math.isfinite(v):
            return None
        return v
    return [_to_python(v) for v in a]


def _nulls(x):
    if isinstance(x, dict):
        return {k: _nulls(v) for k, v in x.items()}
    return None if not getattr(x, "shape", ()) else [None] * int(np.prod(x.shape))


def _check_x64(dtype) -> None:
    import jax

    if np.dtype(dtype).itemsize > 4 and not jax.config.jax_enable_x64:
        raise ValueError(f"dtype {np.dtype(dtype)} needs jax.config.update('jax_enable_x64', True); "
                         "the default float32 is enough for monitoring")


def _check_shapes(h, hp) -> str | None:
    if h.ndim != 2:
        return f"h must have shape (N, D); got shape {tuple(h.shape)}"
    if hp.ndim != 2:
        return f"h_prime must have shape (N, D); got shape {tuple(hp.shape)}"
    if h.shape != hp.shape:
        return f"h and h_prime must have the same shape; got {tuple(h.shape)} and {tuple(hp.shape)}"
    if h.shape[0] < 2:
        return f"need N >= 2 pairs (one positive and at least one negative); got N = {h.shape[0]}"
    if h.shape[1] < 1:
        return f"need D >= 1; got shape {tuple(h.shape)}"
    return None


def _health_reason(health) -> str | None:
    reasons = []
    for name in ("h", "h_prime"):
        bad = int(health[f"nonfinite_{name}"])
        if bad:
            reasons.append(f"{name} has {bad} non-finite entries")
        row = int(health[f"zero_row_{name}"])
        if row >= 0:
            reasons.append(f"{name} has a zero vector at row {row}")
    return "; ".join(reasons) or None


class ParadigmMonitor:
    """The training hook: Li et al. 2024's Sec. 3.2 statistics of each monitored batch, logged.

    Two lines in any training loop (NumPy, JAX, or a framework whose tensors support
    DLPack or ``__array__``; that framework is never imported)::

        monitor = ParadigmMonitor(sink="run/monitor.jsonl", every=10)
        monitor.update(step, h, h_prime)   # h, h_prime: the two views, (N, D)

    Where the records go (``sink``): nowhere by default (``update`` returns them);
    a JSON Lines file (``"run/monitor.jsonl"``), a CSV file (``"run/monitor.csv"``),
    TensorBoard (``"tb:runs/exp1"`` or ``TensorBoardSink("runs/exp1")``, needs the
    ``tensorboard`` extra), or an experiment tracker through ``LogSink``, which calls
    any ``log(metrics, step=step)`` with the flattened scalars (``"gd_mean/infonce"``,
    ...): ``LogSink(wandb.log)``, ``LogSink(mlflow.log_metrics)``, ``LogSink(trackio.log)``
    (see ``LogSink``).

    A sharded ``jax.Array`` (a data-parallel global batch) is measured in row blocks
    of ``block`` anchors: no (N, N) matrix is formed, and the numbers are the
    unsharded ones.

    Each update computes, in one jitted pass over the batch (anchors h_i, positives
    h_i', negatives h_j'): ``mu_pos``, ``sigma_pos``, ``mu_neg``, ``sigma_neg``
    (radians; sample mean and standard deviation, ddof = 1, of the N angles θ_ii' and
    of the N(N−1) pooled θ_ij'),
    ``gd_mean`` / ``gd_off_fraction`` per loss (and ``"baseline"``: the GD gate of
    Li et al. 2024 Eq. 5 with ``margin``), ``hardest_share`` (the hardest negative's
    projected contribution to the combined push direction) and ``weight_share`` (its
    share of the softmax weight) per τ, ``ratio`` (dynamic ratio at the hardest
    negative for the anchors passing the GD gate) per ratio loss, the Lemma-1 minimum
    ratio with the hardest negative (``lemma1_min_ratio``: mean and quantiles;
    ``lemma1_feasible_fraction``; ``lemma1_satisfied_fraction`` for r = static_ratio)
    per λ, ``cos_pos_mean``, ``distance_gap`` (Nie et al. 2023 Fig. 3: the mean over anchors
    of the mean Euclidean distance to the negatives minus the distance to the positive), ``align``, ``uniform`` (Wang & Isola, α = t = 2),
    ``m_o`` and ``m_r`` (Zhang et al. 2022, mean of the two views), ``embedding_std``
    (mean over dimensions of the std, ddof = 1, of the l2-normalized rows; mean of the
    two views; ≈ 1/√D healthy, 0 collapsed), and optionally histograms of cos θ_ii',
    cos θ_ij' and the minimum ratio.

    The loss being trained (``trained=``: a ``gradlab.Loss`` of any kind, any text
    ``gradlab.design.resolve_loss`` reads, or a Rho et al. 2023 ``GradientTransform``,
    measured through its surrogate) is measured with its own parameters under the key
    ``"trained"``: ``gd_mean``, ``gd_off_fraction``, ``weight_share`` (W_ij* / Σ_j W_ij
    at the hardest negative, over the anchors with GD > 0, where W is defined),
    ``ratio`` and ``ratio_pass_fraction`` (R at the hardest negative over the anchors
    passing the GD gate). The comparison losses keep their documented defaults under
    their own names. Every record carries ``losses``: for each key, the loss and the
    parameters behind it (``"trained"``, the comparison losses, and ``"baseline"``, the
    Eq. 5 gate with ``margin``), so a comparison entry is never mistaken for the trained loss.

    Dimensional collapse over a window of rows: ``rankme`` (Garrido et al. 2023: exp of
    the entropy of p_k = σ_k / Σσ + ε, ε = 1e-7, σ_k the singular values of the anchors
    h *as given*, not normalized) and ``alpha_req`` (Agrawal et al. 2022: the power-law
    exponent of the centered covariance eigenspectrum, fitted over the ranks
    1 … min(D, W − 1)) need many more rows than one batch, so they are computed on
    tumbling windows of ``rankme_window`` = W consecutive anchor rows (memory: one
    (W, D) float32 buffer, two while a window is computed). The O(W D²) spectra of a
    complete window are computed on a worker thread while training goes on, and the
    first update that finds them done carries them, with ``rankme_rows`` = W and
    ``rankme_step``, the step whose update completed the window (all four ``None``
    until then). An update never waits for them: a window completed while the previous
    one is still computing is skipped (``monitor.window.skipped`` counts them). But the
    run's last record does: ``update(..., last=True)``, or a record still pending when
    :meth:`close` is called, waits for the window in flight and computes a window its batch
    completes, so that the log holds every window the run completed.

    A record is a dict ``{"step", "time", "valid", "reason", "n", "d", <statistics>,
    "update_s"}`` (``time``: wall-clock Unix time; ``update_s``: seconds spent on the
    conversion and the statistics, sinks excluded). NaN values are written as null. Bad input (non-finite values, zero vectors, mismatched shapes,
    N < 2, unreadable objects) gives a record with ``valid = False``, the reason and
    null statistics; ``strict=True`` raises ``MonitorInputError`` instead.

    Args:
      losses: cosine-family loss names or ``gradlab.get_loss(...)`` objects for GD.
      taus: temperatures τ of the weight share.
      lambdas: Lemma-1 step sizes λ.
      margin: the m of the ``"baseline"`` comparison entry, the GD gate of Li et al. 2024
        Eq. 5 (``None`` to skip it). It is a comparison at a fixed m: a trained baseline
        with another m is measured under ``"trained"``.
      every: compute on steps divisible by ``every`` (other calls return ``None``).
      sink: ``None`` (the default: records are only returned, no file is written), a
        path (``.csv`` -> CSV, else JSON Lines), ``"tb:LOGDIR"`` (TensorBoard), a callable
        taking the record (``JSONLSink``, ``CSVSink``, ``TensorBoardSink``, ``LogSink``),
        or a list of those.
      strict: raise on bad input instead of recording it.
      histograms: also record histograms (``hist_bins`` over cos ∈ [−1, 1]).
      ratio_losses: losses whose dynamic ratio is reported.
      gd_threshold: an anchor's GD is off (and fails the gate) when GD < gd_threshold.
      static_ratio: the r of ``lemma1_satisfied_fraction``.
      dtype: compute precision (``numpy.float32`` by default; float64 needs
        ``jax_enable_x64``).
      rankme_window: rows W of the RankMe / α-ReQ window (``None``: not computed).
      block: anchors per row block (memory O(N D + block · N); one block when N <= block).
      trained: the loss being trained (see above; ``None``: no ``"trained"`` entry).

    Examples:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> h = rng.normal(size=(64, 16)); hp = h + 0.3 * rng.normal(size=h.shape)
      >>> monitor = ParadigmMonitor(losses=["infonce"], taus=(0.05,), lambdas=(0.5,), rankme_window=64)
      >>> record = monitor.update(0, h, hp)  # completes a window of 64 rows (computed in the background)
      >>> record["valid"], 0 < record["mu_pos"] < record["mu_neg"], record["rankme"]
      (True, True, None)
      >>> monitor.close()  # waits for the window
      >>> record = monitor.update(1, h, hp)
      >>> record["rankme_rows"], record["rankme_step"], 1 < record["rankme"] < 16
      (64, 0, True)
    """

    def __init__(
        self,
        losses: Sequence = DEFAULT_LOSSES,
        taus: Iterable[float] = DEFAULT_TAUS,
        lambdas: Iterable[float] = DEFAULT_LAMBDAS,
        margin: float | None = 0.3,
        every: int = 1,
        sink=None,
        strict: bool = False,
        histograms: bool = False,
        *,
        ratio_losses: Sequence = DEFAULT_RATIO_LOSSES,
        gd_threshold: float = 0.01,
        static_ratio: float = 1.0,
        hist_bins: int = 50,
        dtype=np.float32,
        rankme_window: int | None = DEFAULT_WINDOW,
        block: int = 256,
        trained=None,
    ):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an integer >= 1; got {every!r}")
        self.config = make_config(
            losses=losses, ratio_losses=ratio_losses, taus=taus, lambdas=lambdas, margin=margin,
            gd_threshold=gd_threshold, static_ratio=static_ratio, histograms=histograms, hist_bins=hist_bins,
            block=block, trained=trained,
        )
        self.losses = monitored_losses(self.config)
        self.window = None if rankme_window is None else CollapseWindow(rankme_window, background=True)
        self.every = every
        self.strict = bool(strict)
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise TypeError(f"dtype must be a floating dtype; got {self.dtype}")
        _check_x64(self.dtype)
        if sink is not None and not isinstance(sink, (list, tuple)):
            sink = [sink]
        sinks = sink or []
        self.sinks = [make_sink(s) for s in sinks]
        self._fn = batch_statistics_fn(self.config)
        self._fetch = host_statistics_fn(self.config)  # the record in one copy per dtype
        self._calls = 0
        self._template = None
        self._pending = None
        self._closing = False  # close() finishes a pending record as the run's last
        self.last = None
        self.n_records = 0

    # --- the hook -----------------------------------------------------------------
    def update(self, step, h, h_prime, *, wait: bool = True, last: bool = False):
        """Measure one batch; write and return its record (``None`` on skipped steps).

        With ``wait=False`` the statistics are only started: on an accelerator they run behind the
        work already queued there (a training step in flight), and the host goes on. The record
        is finished, written and returned by the next ``update`` (which writes it first) or by
        :meth:`flush` or :meth:`close`; this call returns ``None``.

        Args:
          step: the training step (int), or ``None`` to count calls.
          h, h_prime: the two views (N, D), any array-like (see class doc).
          wait: finish the record now (the default) or later (see above).
          last: the run's last record: it waits for the RankMe / α-ReQ window in flight and
            computes a window this batch completes, so that it carries every window.
        """
        self.flush()
        if step is None:
            step = self._calls
        self._calls += 1
        if int(step) % self.every != 0:
            return None
        t0 = time.perf_counter()
        finish = self._begin(int(step), h, h_prime, last)
        begun = time.perf_counter() - t0

        def done():
            t1 = time.perf_counter()
            record = finish()
            record["update_s"] = begun + time.perf_counter() - t1
            self._emit(record)
            return record

        if wait:
            return done()
        self._pending = done
        return None

    __call__ = update

    def flush(self):
        """Finish, write and return the record an ``update(..., wait=False)`` started (``None`` if none)."""
        done, self._pending = self._pending, None
        return None if done is None else done()

    def _invalid(self, step, reason, shape=None):
        if self.strict:
            raise MonitorInputError(reason)
        rec = {"step": step, "time": time.time(), "valid": False, "reason": reason,
               "n": None if shape is None else shape[0], "d": None if shape is None else shape[-1]}
        rec.update(_nulls(self._structure()))
        rec["losses"] = self.losses
        return rec

    def _structure(self):
        if self._template is None:
            import jax

            shape = jax.ShapeDtypeStruct((2, 1), self.dtype)
            out = jax.eval_shape(self._fn, shape, shape)
            self._template = self._public(out)
            self._template.update(dict.fromkeys(WINDOW_KEYS, np.zeros(())))
        return self._template

    def _public(self, out):
        out = dict(out)
        out.pop("_health", None)
        out.pop("_lemma1_per_anchor", None)
        if "histograms" in out:
            cfg = self.config
            out["histograms"] = dict(out["histograms"])
            out["histograms"]["edges_cos"] = np.linspace(-1, 1, cfg.hist_bins + 1)
            lo, hi = cfg.lemma1_hist_range
            out["histograms"]["edges_lemma1"] = np.linspace(lo, hi, cfg.lemma1_hist_bins + 1)
        return out

    def _begin(self, step, h, h_prime, last: bool = False):
        """Check the batch and start its statistics; returns ``() -> record`` (``last``: see
        :meth:`update`; a record finished by :meth:`close` is the last one too)."""
        try:
            h = to_array(h, "h")
            h_prime = to_array(h_prime, "h_prime")
        except InputError as exc:
            record = self._invalid(step, str(exc))
            return lambda: record
        reason = _check_shapes(h, h_prime)
        if reason is None:
            try:
                check_pairwise("the monitor's statistics", h.shape[0], h.shape[1], np.dtype(self.dtype).itemsize)
            except ValueError as exc:
                reason = str(exc)
        if reason is not None:
            record = self._invalid(step, reason, tuple(h.shape) if h.ndim == 2 else None)
            return lambda: record
        h = h.astype(self.dtype)
        h_prime = h_prime.astype(self.dtype)
        statistics = self._fetch.start(h, h_prime)

        def finish():
            out = statistics()
            reason = _health_reason(out["_health"])
            if reason is not None:
                return self._invalid(step, reason, tuple(h.shape))
            rec = {"step": step, "time": time.time(), "valid": True, "reason": None,
                   "n": int(h.shape[0]), "d": int(h.shape[1])}
            rec.update(_to_python(self._public(out)))
            rec.update(_to_python(self.window.add(h, step, wait=last or self._closing)) if self.window is not None
                       else dict.fromkeys(WINDOW_KEYS))
            rec["losses"] = self.losses
            return rec

        return finish

    def _emit(self, record):
        self.last = record
        self.n_records += 1
        for sink in self.sinks:
            try:
                sink(record)
            except Exception as exc:  # noqa: BLE001 - never take the training run down
                if self.strict:
                    raise
                warnings.warn(f"ParadigmMonitor: sink {sink!r} failed: {exc}", RuntimeWarning, stacklevel=3)

    def close(self) -> None:
        """Write a record still pending (:meth:`flush`), then close the file sinks (records already
        written stay readable either way) and the RankMe worker. The pending record is the run's
        last (``update``'s ``last``)."""
        self._closing = True
        try:
            self.flush()
        finally:
            self._closing = False
            self._close()

    def _close(self) -> None:
        if self.window is not None:
            self.window.close()
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if close is not None:
                close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        c = self.config
        return (f"ParadigmMonitor(losses={[e.key for e in c.losses]}, taus={list(c.taus)}, "
                f"lambdas={list(c.lambdas)}, margin={c.margin}, every={self.every}, sinks={self.sinks})")


def _check_entries(arr, name: str) -> None:
    """Raise on a non-finite entry or a zero row, reducing where the array lives (host copy only to name it)."""
    import jax.numpy as jnp

    xp = np if isinstance(arr, np.ndarray) else jnp
    if not bool(xp.all(xp.isfinite(arr))):
        bad = np.argwhere(~np.isfinite(np.asarray(arr)))[0]
        raise ValueError(f"{name} has a non-finite entry at index {tuple(int(i) for i in bad)}")
    if not bool(xp.all(xp.any(arr != 0, axis=1))):
        zero = np.flatnonzero(~np.any(np.asarray(arr) != 0, axis=1))
        raise ValueError(f"{name} has a zero vector at row {int(zero[0])}")


def _stack(trees):
    first = trees[0]
    if isinstance(first, dict):
        return {k: _stack([t[k] for t in trees]) for k in first}
    return np.stack([np.asarray(t) for t in trees])


def analyze(
    h,
    h_prime,
    batch_size: int = 128,
    *,
    losses=DEFAULT_LOSSES,
    taus=DEFAULT_TAUS,
    lambdas=DEFAULT_LAMBDAS,
    margin: float | None = 0.3,
    ratio_losses=DEFAULT_RATIO_LOSSES,
    gd_threshold: float = 0.01,
    static_ratio: float = 1.0,
    histograms: bool = False,
    hist_bins: int = 50,
    dtype=np.float32,
    rankme_window: int | None = DEFAULT_WINDOW,
    block: int = 256,
    trained=None,
) -> dict:
    """The monitor's statistics on saved embeddings, per batch of ``batch_size`` (Li et al. 2024 App. A.2).

    The M pairs are split in order into ⌊M / batch_size⌋ batches (the remainder is
    dropped and counted), and each batch is measured as ``ParadigmMonitor.update``
    would, with the same RankMe / α-ReQ windows over the batches in order (the value
    of batch b is that of the latest window complete by batch b, computed at once;
    the monitor's records carry it once its worker thread is done, under the same
    ``rankme_step``). Bad input raises (this is an offline tool). Sharded
    ``jax.Array`` inputs stay on their devices.

    Args:
      h, h_prime: (M, D) the two views, any array-like.
      batch_size: N per batch (the paper: 128). The other options are as for
        ``ParadigmMonitor``.

    Returns:
      A dict with the record's names, each leaf an array of shape (B,) (one value per
      batch; nested by loss / τ / λ as in a record), plus
      ``lemma1_min_ratio_per_anchor`` {λ: (B, N)} (NaN where infeasible; the Fig. 8a
      distribution), ``histograms`` when asked, ``n_batches``, ``batch_size``, ``dropped``.
      ``rankme`` and ``alpha_req`` are NaN and ``rankme_rows``, ``rankme_step`` (the batch
      index that completed the window) −1 before the first complete window.

    Examples:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> h = rng.normal(size=(256, 16)); hp = h + 0.3 * rng.normal(size=h.shape)
      >>> analyze(h, hp, batch_size=128)["mu_pos"].shape
      (2,)
    """
    cfg = make_config(losses=losses, ratio_losses=ratio_losses, taus=taus, lambdas=lambdas, margin=margin,
                      gd_threshold=gd_threshold, static_ratio=static_ratio, histograms=histograms,
                      hist_bins=hist_bins, block=block, trained=trained)
    window = None if rankme_window is None else CollapseWindow(rankme_window)
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 2:
        raise ValueError(f"batch_size must be an integer >= 2; got {batch_size!r}")
    dtype = np.dtype(dtype)
    _check_x64(dtype)
    h = to_array(h, "h")  # a jax.Array (sharded or not) stays where it is
    h_prime = to_array(h_prime, "h_prime")
    if h.ndim != 2 or h.shape != h_prime.shape:
        raise ValueError(f"h and h_prime must both have shape (M, D); got {tuple(h.shape)} and {tuple(h_prime.shape)}")
    m = h.shape[0]
    if m < batch_size:
        raise ValueError(f"need at least one full batch: M = {m} pairs < batch_size = {batch_size}")
    check_pairwise("analyze", batch_size, h.shape[1], dtype.itemsize)
    for arr, name in ((h, "h"), (h_prime, "h_prime")):
        _check_entries(arr, name)
    n_batches = m // batch_size
    fetch = host_statistics_fn(cfg)
    outs, windows = [], []
    for b in range(n_batches):
        sl = slice(b * batch_size, (b + 1) * batch_size)
        outs.append(fetch(h[sl].astype(dtype), h_prime[sl].astype(dtype)))
        if window is not None:
            windows.append(window.add(h[sl], b))
    res = _stack(outs)
    res.pop("_health", None)
    for key in WINDOW_KEYS:
        fill = -1 if key in ("rankme_rows", "rankme_step") else np.nan
        res[key] = np.array([fill if w[key] is None else w[key] for w in windows] if windows
                            else [fill] * n_batches)
    res["lemma1_min_ratio_per_anchor"] = res.pop("_lemma1_per_anchor", {})
    if histograms:
        res["histograms"]["edges_cos"] = np.linspace(-1, 1, cfg.hist_bins + 1)
        lo, hi = cfg.lemma1_hist_range
        res["histograms"]["edges_lemma1"] = np.linspace(lo, hi, cfg.lemma1_hist_bins + 1)
    res["losses"] = monitored_losses(cfg)
    res["n_batches"] = n_batches
    res["batch_size"] = int(batch_size)
    res["dropped"] = m - n_batches * batch_size
    return res


def _pick(tree, b):
    if isinstance(tree, dict):
        return {k: _pick(v, b) for k, v in tree.items()}
    return _to_python(np.asarray(tree)[b])


def analysis_records(res: dict):
    """``analyze``'s result as one record per batch (``step`` = batch index), for any sink.

    Examples:
      >>> import numpy as np
      >>> rng = np.random.default_rng(0)
      >>> h = rng.normal(size=(64, 8)); hp = h + 0.3 * rng.normal(size=h.shape)
      >>> res = analyze(h, hp, batch_size=32, losses=["infonce"], taus=(0.05,), lambdas=(0.5,))
      >>> [(r["step"], r["n"], round(r["gd_mean"]["infonce"], 6) == round(float(res["gd_mean"]["infonce"][r["step"]]), 6))
      ...  for r in analysis_records(res)]
      [(0, 32, True), (1, 32, True)]
    """
    skip = ("n_batches", "batch_size", "dropped", "lemma1_min_ratio_per_anchor", "histograms", "losses")
    hists = res.get("histograms")
    for b in range(int(res["n_batches"])):
        rec = {"step": b, "valid": True, "reason": None, "n": int(res["batch_size"])}
        rec.update({k: _pick(v, b) for k, v in res.items() if k not in skip})
        rec["losses"] = res["losses"]
        for key in ("rankme_rows", "rankme_step"):
            if rec.get(key) == -1:
                rec[key] = None
        if hists is not None:
            rec["histograms"] = {k: (np.asarray(v).tolist() if k.startswith("edges") else _pick(v, b))
                                 for k, v in hists.items()}
        yield rec


def min_ratio_distribution(h, h_prime, *, lams=defaults.LEMMA1_LAMS, batch_size: int = 128, bins=None,
                           quantiles=defaults.MIN_RATIO_QUANTILES, ratios=defaults.LEMMA1_RATIOS,
                           dtype=np.float32):
    """Li et al. 2024 Fig. 8a from real embeddings: the Lemma-1 minimum ratio of every anchor with its hardest negative.

    The pairs are split into batches of ``batch_size`` as in ``analyze`` (App. A.2); α is
    measured from the embeddings. The summary is the simulator's
    (``gradlab.lemma1.summarize_min_ratio``), so the two distributions compare directly.

    Returns:
      ``gradlab.io.Result`` with dims (lam,), as ``gradlab.simulate.min_ratio_distribution``.
    """
    from gradlab.lemma1 import summarize_min_ratio

    lams = _positive_tuple(lams, "lams")
    batch_size = min(int(batch_size), int(np.shape(h)[0]))
    res = analyze(h, h_prime, batch_size=batch_size, losses=(), ratio_losses=(), taus=(), lambdas=lams,
                  margin=None, dtype=dtype, rankme_window=None)
    per_anchor = res["lemma1_min_ratio_per_anchor"]
    samples = np.stack([np.asarray(v, dtype=float).reshape(-1) for v in per_anchor.values()])
    return summarize_min_ratio(samples, lams, bins=bins, quantiles=quantiles, ratios=ratios, meta={
        "statistic": "min_ratio_distribution", "source": "embeddings", "batch_size": batch_size,
        "n_anchors": int(res["n_batches"]) * batch_size,
        "n_batches": int(res["n_batches"]), "dropped": int(res["dropped"]),
    })
