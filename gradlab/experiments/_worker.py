"""Execute one run (in the calling process or a spawned worker): train, analyze the held-out
sentences before and after, write the run directory and commit it.

One run's life, top to bottom (``run_one``): check the store (``_check_store``: the probe, a
committed ``done`` record, the lease) -> build directory (``_build_dir``) -> train and held-out
analysis (``_train``, ``_train_in``) -> commit (``_commit_if_held``) -> the record.

This module imports no JAX (nor NumPy) at import time, so a spawned worker can limit XLA's
threads (``limit_threads``) before JAX starts.
"""

from __future__ import annotations

import contextlib
import errno
import math
import shutil
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradlab import defaults
from gradlab.errors import one_line
from gradlab.experiments._spec import RunSpec
from gradlab.experiments._store import (
    Lease,
    acquire_lease,
    commit_run,
    read_lease,
    read_record,
    tmp_dir,
)
from gradlab.threads import limit_threads

__all__ = ["run_one", "RemoteRun", "RemoteRuns", "is_environmental", "check_probe", "limit_threads", "holdout_split",
           "HOLDOUT_SEED", "HELDOUT_TAUS", "HELDOUT_LAMBDAS"]

#: The held-out split is the same for every run (it depends on the corpus only).
HOLDOUT_SEED = 20240611
HELDOUT_TAUS = defaults.TAUS  # Li et al. 2024 Figs. 3 and 7
HELDOUT_LAMBDAS = defaults.LEMMA1_LAMS  # Li et al. 2024 Fig. 8a
HELDOUT_COS_BINS = 200  # Fig. 5: cosine bins 0.01 wide over [-1, 1], so the narrow positive peak spans several
_MONITOR_KEYS = ("mu_pos", "mu_neg", "sigma_pos", "sigma_neg", "cos_pos_mean", "cos_neg_mean", "align", "uniform",
                 "m_o", "m_r", "distance_gap")

_CACHE: dict[Any, Any] = {}
#: The leases this process holds, by run id (``release_held`` frees them on preemption).
_HELD: dict[str, Lease] = {}


# --------------------------------------------------------------------------- the worker process
def use_compile_cache(directory: str | None = None) -> None:
    """Switch on gradlab's persistent compilation cache (``gradlab.enable_cache``) in this worker.

    ``directory`` is the launcher's cache location (so every worker of a study, on any host,
    uses the one configured for the CLI and the library); None = ``GRADLAB_CACHE_DIR`` or
    the user cache directory; ``"off"`` leaves it off. Best effort: a cache is an optimization,
    an unusable directory only costs compilations.
    """
    if _CACHE.get("compile_cache") == (directory,):
        return
    _CACHE["compile_cache"] = (directory,)
    try:
        from gradlab._cache import enable_cache

        enable_cache(directory)
    except Exception:  # noqa: BLE001 - a cache is an optimization only
        pass


def release_held() -> None:
    """Release every lease this process holds (a preempted job, before it is requeued)."""
    for lease in list(_HELD.values()):
        lease.release()


# --------------------------------------------------------------------------- faults
#: ``errno`` values of an ``OSError`` that say the machine, not the run, failed.
ENVIRONMENTAL_ERRNO = frozenset({errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.ESTALE, errno.ENOMEM})


def is_environmental(exc: BaseException) -> bool:
    """Whether an exception is a fault of the machine (retried, never recorded as a result).

    Environmental: ``OSError`` ENOSPC / EIO / EDQUOT / ESTALE / ENOMEM, ``MemoryError``, and XLA's
    ``RESOURCE_EXHAUSTED`` (out of device memory). Anything else raised by a run (its loss
    raising, a non-finite loss, a ``ValueError`` / ``TypeError``) is deterministic.

    Examples:
      >>> is_environmental(OSError(errno.ENOSPC, "No space left on device"))
      True
      >>> is_environmental(RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 4 GiB"))
      True
      >>> is_environmental(FloatingPointError("non-finite training loss at step 3"))
      False
    """
    if isinstance(exc, MemoryError):
        return True
    if isinstance(exc, OSError) and exc.errno in ENVIRONMENTAL_ERRNO:
        return True
    return "RESOURCE_EXHAUSTED" in str(exc)


class StoreNotShared(RuntimeError):
    """The worker cannot read the launcher's probe file: it does not see the same OUT."""


PROBE = ".probe-"


def check_probe(out: str, probe: str) -> None:
    """Raise :class:`StoreNotShared` unless ``out/.probe-<probe>`` holds ``probe``."""
    import socket

    path = Path(out) / f"{PROBE}{probe}"
    try:
        seen = path.read_text(encoding="utf-8").strip()
    except OSError:
        seen = None
    if seen != probe:
        raise StoreNotShared(f"the experiment directory {str(out)!r} is not the launcher's on host "
                             f"{socket.gethostname()!r} (cannot read {path.name}): workers must see the same "
                             "directory (a shared filesystem)")


# --------------------------------------------------------------------------- one run's life
def run_one(spec_dict: dict[str, Any], out: str, probe: str | None = None, cache: str | None = None) -> dict[str, Any]:
    """Claim, train and commit one run ``out/runs/<id>``; returns its record.

    ``record["status"]``: ``done`` or ``failed`` (committed: a deterministic error of the run,
    its one-line error recorded); ``retry`` (an environmental fault, see ``is_environmental``:
    nothing committed, ``reason`` says why); ``busy`` (another live worker holds the run's
    lease; ``holder`` names its host). A KeyboardInterrupt removes the build directory,
    releases the lease and propagates.

    Args:
      spec_dict: ``RunSpec.to_dict()`` (all that travels to a worker, with ``out``).
      out: the experiment directory, as the worker sees it.
      probe: the launcher's probe token (checks that the worker sees the launcher's ``out``).
      cache: the compilation cache directory (``use_compile_cache``).
    """
    spec = RunSpec.from_dict(spec_dict)
    record, lease = _check_store(out, spec.id, probe)
    if lease is not None:
        record = _run_leased(spec, out, lease, cache)
    return {**record, "spec": spec.to_dict()}


def _check_store(out: str, run_id: str, probe: str | None) -> tuple[dict[str, Any] | None, Lease | None]:
    """The store's answer before any work: ``(None, lease)`` when this worker claimed the run, else
    ``(record, None)``: its committed ``done`` record, ``busy`` (another worker's live lease) or
    ``retry`` (the store itself failed: not this run's result)."""
    try:
        if probe is not None:
            check_probe(out, probe)
        record = _done_record(out, run_id)
        lease = None if record is not None else acquire_lease(out, run_id)
    except Exception as exc:  # noqa: BLE001 - the store itself failed: not this run's result
        return _retry(run_id, one_line(exc), retryable=not isinstance(exc, StoreNotShared)), None
    if record is None and lease is None:
        record = _busy(run_id, (read_lease(out, run_id) or {}).get("host"))
    return record, lease


def _run_leased(spec: RunSpec, out: str, lease: Lease, cache: str | None) -> dict[str, Any]:
    """The record of a claimed run; the lease is released whatever happens (a KeyboardInterrupt too)."""
    _HELD[spec.id] = lease
    try:
        done = _done_record(out, spec.id)  # committed by another worker between the check and the claim
        return done if done is not None else _build_train_commit(spec, out, lease, cache)
    finally:
        _HELD.pop(spec.id, None)
        lease.release()


def _build_train_commit(spec: RunSpec, out: str, lease: Lease, cache: str | None) -> dict[str, Any]:
    """Build the run directory, train, commit: the committed record; ``busy`` when the lease was lost
    meanwhile; ``retry`` when the machine failed (disk, memory: nothing is committed)."""
    t0 = time.perf_counter()
    try:
        use_compile_cache(cache)
        with _build_dir(out, spec.id, lease.token) as build:
            _write_json(build / "config.json", {"id": spec.id, "schema_json": spec.canonical_json(), **spec.to_dict()})
            marker = _train(spec, build, t0)
            committed = _commit_if_held(out, spec.id, build, marker, lease)
    except Exception as exc:  # noqa: BLE001 - the machine failed (disk, memory): nothing is committed
        return _retry(spec.id, one_line(exc))
    return _read_back(out, spec.id) if committed else _lease_lost(spec.id)


@contextlib.contextmanager
def _build_dir(out: str, run_id: str, token: str) -> Iterator[Path]:
    """A fresh private build directory, removed if anything (a fault, a KeyboardInterrupt) escapes."""
    build = tmp_dir(out, run_id, token)
    try:
        yield build
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise


def _train(spec: RunSpec, build: Path, t0: float) -> dict[str, Any]:
    """Train in ``build`` and write ``result.json``: the marker to commit. A deterministic error of the
    run is the ``failed`` marker (its traceback in ``error.txt``); an environmental one propagates."""
    try:
        result = _train_in(spec, build)
        seconds = time.perf_counter() - t0
        _write_json(build / "result.json", {"id": spec.id, "label": spec.label, **result})
        return {"status": "done", "id": spec.id, "seconds": seconds}
    except Exception as exc:  # noqa: BLE001 - a failing run is recorded, the sweep goes on
        if is_environmental(exc):
            raise
        (build / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
        return {"status": "failed", "id": spec.id, "error": one_line(exc), "seconds": time.perf_counter() - t0}


def _commit_if_held(out: str, run_id: str, build: Path, marker: dict[str, Any], lease: Lease) -> bool:
    """Commit ``build`` as the run; False (``build`` removed) when another worker reclaimed the lease as stale."""
    held = lease.held()
    if held:
        commit_run(out, run_id, build, marker, token=lease.token)
    else:
        shutil.rmtree(build, ignore_errors=True)
    return held


def _write_json(path: Path, data: dict[str, Any]) -> None:
    from gradlab.io import save_json_atomic  # NumPy: only once a run starts

    save_json_atomic(path, data)


def _done_record(out: str, run_id: str) -> dict[str, Any] | None:
    """The run's committed record if it is ``done``, else None."""
    record = read_record(out, run_id)
    return record if record is not None and record["status"] == "done" else None


def _read_back(out: str, run_id: str) -> dict[str, Any]:
    """The record just committed."""
    record = read_record(out, run_id)
    if record is None:  # pragma: no cover - committed by the caller
        return _retry(run_id, "the committed run could not be read back")
    return record


def _retry(run_id: str, reason: str, retryable: bool = True) -> dict[str, Any]:
    return {"status": "retry", "id": run_id, "reason": reason, "retryable": retryable}


def _busy(run_id: str, holder: str | None) -> dict[str, Any]:
    return {"status": "busy", "id": run_id, "holder": holder}


def _lease_lost(run_id: str) -> dict[str, Any]:
    return {**_busy(run_id, None), "reason": "lease lost (reclaimed as stale)"}


# --------------------------------------------------------------------------- train and analyze
def _train_in(spec: RunSpec, build: Path) -> dict[str, Any]:
    """Train the run in ``build``, then analyze its held-out sentences before and after: its result."""
    encoder, sentences, token_ids, held_ids = _inputs(spec)
    res = _train_encoder(spec, encoder, sentences, token_ids, build)
    heldout = _heldout_analysis(spec, encoder, res.params, held_ids, build)
    return {
        "best_dev": res.best_dev, "best_step": res.best_step, "dev_before": res.dev_before,
        "test_before": res.test_before, "test_after": res.test_after, "evals": res.evals,
        "loss_first": float(res.losses[0]), "loss_last": float(res.losses[-1]),
        "n_sentences": len(sentences), "n_heldout": int(len(held_ids) // spec.batch_size * spec.batch_size),
        "monitor_status": res.monitor, "monitor": _monitor_summary(build / "paradigm_monitor.jsonl"),
        "heldout": heldout, **_senteval_scores(spec, encoder, res.params),
    }


def _senteval_scores(spec: RunSpec, encoder, params) -> dict[str, Any]:
    """With ``spec.senteval``: ``sts_before`` / ``sts_after``, the seven STS tasks' Spearman × 100 and
    their ``avg`` at state 0 and for the best checkpoint (the tasks read once per process)."""
    if spec.senteval is None:
        return {}
    from gradlab.real import STS_TASKS, evaluate_sts, load_senteval

    data = _cached(("senteval", spec.senteval_sha256), lambda: load_senteval(spec.senteval, STS_TASKS))
    return {f"sts_{when}": evaluate_sts(lambda s, p=p: encoder.encode(s, params=p), data=data)["spearman"]
            for when, p in (("before", encoder.params), ("after", params))}


def _inputs(spec: RunSpec) -> tuple[Any, list[str], Any, Any]:
    """(encoder, training sentences, their token ids, the held-out sentences' token ids); token ids are
    cached per process."""
    from gradlab.real.data import sample_sentences

    pool, heldout = _corpus(spec)
    encoder = _encoder(spec)
    model = (spec.encoder, spec.encoder_sha256, spec.recipe)  # what the token ids depend on
    corpus = (spec.corpus, spec.corpus_sha256, spec.holdout, spec.heldout_max)  # what the split depends on
    sentences = pool if spec.max_sentences is None else sample_sentences(pool, spec.max_sentences, seed=spec.seed)
    token_ids = _cached(("tok", model, corpus, spec.max_sentences, spec.seed), lambda: encoder.token_ids(sentences))
    held = sample_sentences(heldout, spec.heldout_max, seed=0)
    held_ids = _cached(("held", model, corpus), lambda: encoder.token_ids(held))
    return encoder, sentences, token_ids, held_ids


def _train_encoder(spec: RunSpec, encoder, sentences: list[str], token_ids, build: Path):
    """The trainer's result, its logs and summary written into ``build`` (no parameters or model:
    their size; rerun to get them); FloatingPointError unless every step ran with a finite loss."""
    from gradlab.real.trainer import train

    config = spec.train_config(max_sentences=None, monitor=True)  # the sentences are sampled by the caller
    res = train(config, encoder=encoder, sentences=sentences, out_dir=build, token_ids=token_ids,
                outputs=("log", "monitor", "summary"))
    done = len(res.losses)
    if done < spec.steps or not all(math.isfinite(x) for x in res.losses):
        raise FloatingPointError(f"non-finite training loss at step {done}")
    return res


def _heldout_analysis(spec: RunSpec, encoder, params, held_ids, build: Path) -> dict[str, dict[str, float]]:
    """Held-out statistics before (the encoder's own params) and after training (``params``): all of
    them saved to ``build/heldout.npz``, the scalars returned by phase."""
    import numpy as np

    from gradlab.io import save_npz_atomic

    stats = {"before": _heldout_stats(encoder, encoder.params, held_ids, spec),
             "after": _heldout_stats(encoder, params, held_ids, spec)}
    save_npz_atomic(build / "heldout.npz",
                    **{f"{phase}/{k}": np.asarray(v) for phase, d in stats.items() for k, v in d.items()})
    return {phase: {k: float(v) for k, v in d.items() if np.ndim(v) == 0} for phase, d in stats.items()}


def holdout_split(n: int, fraction: float | None = None, *, count: int | None = None) -> tuple[Any, Any]:
    """(train indices, held-out indices) of ``n`` sentences: a fixed-seed permutation, the first
    ``ceil(fraction * n)`` (or ``count``) held out. Independent of the run seed: no run ever trains on them.

    Examples:
      >>> tr, ho = holdout_split(10, 0.1)
      >>> len(tr), len(ho), sorted(set(tr) | set(ho)) == list(range(10))
      (9, 1, True)
      >>> [len(part) for part in holdout_split(10, count=3)]
      [7, 3]
    """
    import numpy as np

    if (fraction is None) == (count is None):
        raise ValueError("give one of fraction and count")
    perm = np.random.default_rng(HOLDOUT_SEED).permutation(n)
    k = max(1, math.ceil(fraction * n)) if fraction is not None else min(int(count), n - 1)
    return np.sort(perm[k:]), np.sort(perm[:k])


def _cached(key, make):
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _corpus(spec):
    """(training pool, held-out sentences): a named corpus split by the fraction ``holdout``, a corpus
    file (one sentence per line) by ``heldout_max`` lines."""
    from gradlab.real.data import load_news_sentences, read_lines

    def make():
        if spec.corpus_sha256 is None:
            sentences = load_news_sentences(spec.corpus)
            tr, ho = holdout_split(len(sentences), spec.holdout)
        else:
            sentences = read_lines(spec.corpus)
            tr, ho = holdout_split(len(sentences), count=spec.heldout_max)
        return [sentences[i] for i in tr], [sentences[i] for i in ho]

    return _cached(("corpus", spec.corpus, spec.corpus_sha256, spec.holdout, spec.heldout_max), make)


def _encoder(spec):
    """The encoder a run trains: the light head (seeded) over MiniLM's tokens, MiniLM or a checkpoint
    with the run's pooling (loaded once per process), or the trainer's recipe encoder (its MLP seeded)."""
    from gradlab.real import load_encoder
    from gradlab.real.hf import load_minilm
    from gradlab.real.light import light_from_minilm
    from gradlab.real.run import encoder_for

    if spec.encoder == "light":
        return light_from_minilm(_cached("minilm", load_minilm), seed=spec.seed, dropout=spec.dropout)
    config = spec.train_config(loss="baseline")  # only its encoder fields are read
    if spec.recipe is not None:
        return encoder_for(config, None)
    # train() never modifies the encoder's params
    return _cached(("transformer", spec.encoder, spec.encoder_sha256, spec.pooling),
                   lambda: load_encoder(spec.encoder, **config.encoder_options))


def _views(encoder, params, token_ids, batch_size: int, seed: int):
    """Two dropout views (h, h') of the held-out sentences, in batches of ``batch_size``: the trainer's
    ``views_fn``, batch b keyed by ``fold_in(key(seed + 1000003), b)``."""
    import jax
    import numpy as np

    from gradlab.real.packing import pad_ids
    from gradlab.real.step import views_fn

    # one compiled forward per architecture, pooling and dropout (all it reads of the instance)
    view = getattr(encoder, "train_view", encoder)
    views = _cached(("views", type(view).__name__, getattr(view, "config", None), getattr(view, "pooling", None),
                     getattr(view, "dropout", None)), lambda: jax.jit(views_fn(encoder, packed=False)))
    key = jax.random.key(seed + 1_000_003)
    hs, hps = [], []
    n = (len(token_ids) // batch_size) * batch_size
    L = max(max(1, len(t)) for t in token_ids[:n])
    for b, start in enumerate(range(0, n, batch_size)):
        batch = pad_ids([t if t else [0] for t in token_ids[start:start + batch_size]], encoder.max_seq_length,
                        pad_to=min(L, encoder.max_seq_length))
        h, hp = views(params, encoder.frozen, batch, jax.random.fold_in(key, b))
        hs.append(np.asarray(h))
        hps.append(np.asarray(hp))
    return np.concatenate(hs), np.concatenate(hps)


def _heldout_stats(encoder, params, token_ids, spec) -> dict[str, Any]:
    """Monitor statistics of the held-out views (Figs. 5, 7, 8a): histograms summed over batches."""
    import numpy as np

    from gradlab.monitor import analyze

    h, hp = _views(encoder, params, token_ids, spec.batch_size, spec.seed)
    res = analyze(h, hp, batch_size=spec.batch_size, losses=("infonce",), ratio_losses=(), taus=HELDOUT_TAUS,
                  lambdas=HELDOUT_LAMBDAS, margin=None, histograms=True, hist_bins=HELDOUT_COS_BINS)
    hist = res["histograms"]
    out = {
        "cos_edges": np.asarray(hist["edges_cos"]),
        "cos_pos_hist": np.asarray(hist["cos_pos"]).sum(0),
        "cos_neg_hist": np.asarray(hist["cos_neg"]).sum(0),
        "lemma1_edges": np.asarray(hist["edges_lemma1"]),
    }
    for k in HELDOUT_TAUS:
        out[f"hardest_share/{k:g}"] = np.asarray(res["hardest_share"][f"{k:g}"]).mean()
    for lam in HELDOUT_LAMBDAS:
        out[f"lemma1_hist/{lam:g}"] = np.asarray(hist["lemma1_min_ratio"][f"{lam:g}"]).sum(0)
        out[f"lemma1_feasible/{lam:g}"] = np.asarray(res["lemma1_feasible_fraction"][f"{lam:g}"]).mean()
    for k in ("mu_pos", "mu_neg", "sigma_pos", "sigma_neg", "cos_pos_mean", "cos_neg_mean"):
        out[k] = np.asarray(res[k]).mean()
    return out


def _monitor_summary(path: Path) -> dict[str, Any]:
    """First (step 0, before any update) and last monitored states, and the trained loss's mean GD over the run."""
    from gradlab.monitor import read_log

    if not path.is_file():
        return {}
    recs = [r for r in read_log(path) if r.get("valid")]
    if not recs:
        return {}

    def pick(r):
        trained = {f"{k}_trained": (r.get(k) or {}).get("trained") for k in ("gd_mean", "gd_off_fraction")}
        return {"step": r.get("step"), **{k: r.get(k) for k in _MONITOR_KEYS}, **trained}

    sig = {k: [r[k] for r in recs if isinstance(r.get(k), (int, float))] for k in ("sigma_pos", "sigma_neg")}
    gd = [g for r in recs if isinstance(g := (r.get("gd_mean") or {}).get("trained"), (int, float))]
    series = [[r.get("step"), (r.get("gd_mean") or {}).get("trained")] for r in recs]
    return {"first": pick(recs[0]), "last": pick(recs[-1]), "records": len(recs), "gd_trained": series,
            "gd_mean_run": sum(gd) / len(gd) if gd else None,
            "sigma_pos_mean": sum(sig["sigma_pos"]) / len(sig["sigma_pos"]) if sig["sigma_pos"] else None,
            "sigma_neg_mean": sum(sig["sigma_neg"]) / len(sig["sigma_neg"]) if sig["sigma_neg"] else None}


# --------------------------------------------------------------------------- cluster callables
class RemoteRuns:
    """One cluster task running several runs in turn: ``RemoteRuns(fn)([args, ...])`` -> one result each.

    A fresh worker process pays its start-up, imports and model loading once per task instead of
    once per run. A run's exception becomes its result (the launcher classifies it), so one
    failing run does not take its neighbours down. ``checkpoint`` (submitit's preemption /
    timeout hook) releases the held leases and resubmits the whole task; the runs it already
    committed are found done and not trained again.
    """

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, calls: list) -> list:
        out = []
        for args in calls:
            try:
                out.append(self.fn(*args))
            except Exception as exc:  # noqa: BLE001 - reported per run
                out.append(exc)
        return out

    def checkpoint(self, *args: Any, **kwargs: Any):
        from submitit.helpers import DelayedSubmission

        release_held()
        return DelayedSubmission(self, *args, **kwargs)


class RemoteRun:
    """The callable sent to a cluster worker: ``RemoteRun()(spec_dict, out, probe, cache, threads)``.

    Only the spec dict and a few strings travel (never a jitted function). ``checkpoint`` is
    submitit's preemption / timeout hook: it releases the run's lease and resubmits the same
    call, which restarts the run from scratch (the trainer keeps no resumable state; a run is
    short, and its id makes the restart compute the same numbers).
    """

    def __call__(self, spec_dict: dict[str, Any], out: str, probe: str | None = None, cache: str | None = None,
                 threads: int | None = None) -> dict[str, Any]:
        if threads:
            limit_threads(int(threads))
        return run_one(spec_dict, out, probe=probe, cache=cache)

    def checkpoint(self, *args: Any, **kwargs: Any):
        from submitit.helpers import DelayedSubmission

        release_held()
        return DelayedSubmission(self, *args, **kwargs)
