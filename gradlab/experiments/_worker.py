"""Execute one run (in the calling process or a spawned worker): train, analyze the held-out
sentences before and after, write the run directory and commit it.

This module imports no JAX at import time, so a spawned worker can limit XLA's threads
(``limit_threads``) before JAX starts.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from pathlib import Path
from typing import Any

from gradlab import defaults

__all__ = ["run_one", "limit_threads", "holdout_split", "HOLDOUT_SEED", "HELDOUT_TAUS", "HELDOUT_LAMBDAS"]

#: The held-out split is the same for every run (it depends on the corpus only).
HOLDOUT_SEED = 20240611
HELDOUT_TAUS = defaults.TAUS  # Li et al. 2024 Figs. 3 and 7
HELDOUT_LAMBDAS = defaults.LEMMA1_LAMS  # Li et al. 2024 Fig. 8a
_MONITOR_KEYS = ("mu_pos", "mu_neg", "sigma_pos", "sigma_neg", "cos_pos_mean", "cos_neg_mean", "align", "uniform",
                 "m_o", "m_r")

_CACHE: dict[Any, Any] = {}


def limit_threads(threads: int) -> None:
    """Ask XLA and BLAS for ``threads`` threads per process; call before JAX computes anything."""
    if threads != 1:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    extra = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {extra}".strip()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"


def use_compile_cache(out: str | os.PathLike) -> None:
    """Keep XLA compilations in ``out/.jax_cache``: the seeds of one configuration (and a rerun)
    compile the same training step and monitor once. Best effort: JAX may refuse once it compiled."""
    if _CACHE.get("compile_cache"):
        return
    _CACHE["compile_cache"] = True
    try:
        import jax

        jax.config.update("jax_compilation_cache_dir", str(Path(out) / ".jax_cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except Exception:  # noqa: BLE001 - a cache is an optimization only
        pass


def holdout_split(n: int, fraction: float) -> tuple[Any, Any]:
    """(train indices, held-out indices) of ``n`` sentences: a fixed-seed permutation, the first
    ``ceil(fraction * n)`` held out. Independent of the run seed: no run ever trains on them.

    Examples:
      >>> tr, ho = holdout_split(10, 0.1)
      >>> len(tr), len(ho), sorted(set(tr) | set(ho)) == list(range(10))
      (9, 1, True)
    """
    import numpy as np

    perm = np.random.default_rng(HOLDOUT_SEED).permutation(n)
    k = max(1, math.ceil(fraction * n))
    return np.sort(perm[k:]), np.sort(perm[:k])


def _cached(key, make):
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _corpus(spec):
    from gradlab.real.data import load_news_sentences

    def make():
        sentences = load_news_sentences(spec.corpus)
        tr, ho = holdout_split(len(sentences), spec.holdout)
        return [sentences[i] for i in tr], [sentences[i] for i in ho]

    return _cached(("corpus", spec.corpus, spec.holdout), make)


def _encoder(spec):
    from gradlab.real.light import light_from_minilm
    from gradlab.real.minilm import load_minilm

    base = _cached("minilm", load_minilm)
    if spec.encoder == "minilm":
        return base  # train() never modifies the encoder's params
    return light_from_minilm(base, seed=spec.seed, dropout=spec.dropout)


def _views(encoder, params, token_ids, batch_size: int, seed: int):
    """Two dropout views (h, h') of the held-out sentences, in batches of ``batch_size``."""
    import jax
    import numpy as np

    from gradlab.real.minilm import pad_ids

    # one compiled forward per encoder kind and dropout (its only dependence on the instance)
    fwd = _cached(("views", type(encoder).__name__, getattr(encoder, "dropout", None)), lambda: jax.jit(encoder.forward))
    key = jax.random.key(seed + 1_000_003)
    hs, hps = [], []
    n = (len(token_ids) // batch_size) * batch_size
    L = max(max(1, len(t)) for t in token_ids[:n])
    for b, start in enumerate(range(0, n, batch_size)):
        ids, mask = pad_ids([t if t else [0] for t in token_ids[start:start + batch_size]], encoder.max_seq_length,
                            pad_to=min(L, encoder.max_seq_length))
        k1, k2 = jax.random.split(jax.random.fold_in(key, b))
        hs.append(np.asarray(fwd(params, encoder.frozen, ids, mask, k1)))
        hps.append(np.asarray(fwd(params, encoder.frozen, ids, mask, k2)))
    return np.concatenate(hs), np.concatenate(hps)


def _heldout_stats(encoder, params, token_ids, spec) -> dict[str, Any]:
    """Monitor statistics of the held-out views (Figs. 5, 7, 8a): histograms summed over batches."""
    import numpy as np

    from gradlab.monitor import analyze

    h, hp = _views(encoder, params, token_ids, spec.batch_size, spec.seed)
    res = analyze(h, hp, batch_size=spec.batch_size, losses=("infonce",), ratio_losses=(), taus=HELDOUT_TAUS,
                  lambdas=HELDOUT_LAMBDAS, margin=None, histograms=True)
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


def _monitor_summary(path: Path, loss_name: str) -> dict[str, Any]:
    from gradlab.monitor import read_log

    if not path.is_file():
        return {}
    recs = [r for r in read_log(path) if r.get("valid")]
    if not recs:
        return {}

    def pick(r):
        return {"step": r.get("step"), **{k: r.get(k) for k in _MONITOR_KEYS}}

    sig = {k: [r[k] for r in recs if isinstance(r.get(k), (int, float))] for k in ("sigma_pos", "sigma_neg")}
    gd = [g for r in recs if isinstance(g := (r.get("gd_mean") or {}).get(loss_name), (int, float))]
    return {"first": pick(recs[0]), "last": pick(recs[-1]), "records": len(recs),
            "gd_mean_run": sum(gd) / len(gd) if gd else None,
            "sigma_pos_mean": sum(sig["sigma_pos"]) / len(sig["sigma_pos"]) if sig["sigma_pos"] else None,
            "sigma_neg_mean": sum(sig["sigma_neg"]) / len(sig["sigma_neg"]) if sig["sigma_neg"] else None}


def _train_in(spec, build: Path) -> dict[str, Any]:
    import numpy as np

    from gradlab.design import resolve_loss
    from gradlab.io import save_npz_atomic
    from gradlab.real.data import sample_sentences
    from gradlab.real.train import TrainConfig, train

    loss = resolve_loss(spec.loss)
    pool, heldout = _corpus(spec)
    encoder = _encoder(spec)
    sentences = sample_sentences(pool, spec.max_sentences, seed=spec.seed)
    token_ids = _cached(("tok", spec.encoder, spec.corpus, spec.holdout, spec.max_sentences, spec.seed),
                        lambda: encoder.token_ids(sentences))
    held = sample_sentences(heldout, spec.heldout_max, seed=0)
    held_ids = _cached(("held", spec.encoder, spec.corpus, spec.holdout, spec.heldout_max),
                       lambda: encoder.token_ids(held))
    config = TrainConfig(loss=loss,
                         encoder=spec.encoder, steps=spec.steps, batch_size=spec.batch_size, lr=spec.lr,
                         eval_every=spec.eval_every, seed=spec.seed, dev_pairs=spec.dev_pairs,
                         eval_test=spec.eval_test, monitor=True, monitor_every=spec.monitor_every)
    res = train(config, encoder=encoder, sentences=sentences, out_dir=build, token_ids=token_ids)
    done = len(res.losses)
    if done < spec.steps or not all(math.isfinite(x) for x in res.losses):
        raise FloatingPointError(f"non-finite training loss at step {done}")
    (build / "best_params.npz").unlink(missing_ok=True)  # checkpoints are not kept (size); rerun to get one
    before = _heldout_stats(encoder, encoder.params, held_ids, spec)
    after = _heldout_stats(encoder, res.params, held_ids, spec)
    save_npz_atomic(build / "heldout.npz", **{f"before/{k}": np.asarray(v) for k, v in before.items()},
                    **{f"after/{k}": np.asarray(v) for k, v in after.items()})
    return {
        "best_dev": res.best_dev, "best_step": res.best_step, "dev_before": res.dev_before,
        "test_before": res.test_before, "test_after": res.test_after, "evals": res.evals,
        "loss_first": float(res.losses[0]), "loss_last": float(res.losses[-1]),
        "n_sentences": len(sentences), "n_heldout": int(len(held_ids) // spec.batch_size * spec.batch_size),
        "monitor_status": res.monitor, "monitor": _monitor_summary(build / "paradigm_monitor.jsonl", loss.spec.name),
        "heldout": {phase: {k: float(v) for k, v in d.items() if np.ndim(v) == 0}
                    for phase, d in (("before", before), ("after", after))},
    }


def run_one(spec_dict: dict[str, Any], out: str) -> dict[str, Any]:
    """Train one run and commit ``out/runs/<id>``; returns its record.

    An exception from the run is recorded (status ``failed``, its one-line error); a
    KeyboardInterrupt removes the build directory and propagates (nothing is committed).
    """
    from gradlab.experiments._spec import RunSpec
    from gradlab.experiments._store import commit_run, read_record, tmp_dir
    from gradlab.io import save_json_atomic

    spec = RunSpec.from_dict(spec_dict)
    run_id = spec.id
    use_compile_cache(out)
    build = tmp_dir(out, run_id)
    t0 = time.perf_counter()
    try:
        save_json_atomic(build / "config.json", {"id": run_id, "schema_json": spec.canonical_json(), **spec.to_dict()})
        try:
            result = _train_in(spec, build)
            marker = {"status": "done", "id": run_id, "seconds": time.perf_counter() - t0}
            save_json_atomic(build / "result.json", {"id": run_id, "label": spec.label, **result})
        except Exception as exc:  # noqa: BLE001 - a failing run is recorded, the sweep goes on
            error = " ".join(f"{type(exc).__name__}: {exc}".split())
            (build / "error.txt").write_text(traceback.format_exc(), encoding="utf-8")
            marker = {"status": "failed", "id": run_id, "error": error, "seconds": time.perf_counter() - t0}
        commit_run(out, run_id, build, marker)
    except BaseException:
        import shutil

        shutil.rmtree(build, ignore_errors=True)
        raise
    record = read_record(out, run_id)
    record["spec"] = spec.to_dict()
    return record
