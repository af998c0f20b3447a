"""What one run of a study computes: its inputs (the corpus split, the training sample, the encoder), the
trainer, the held-out analysis before and after (Li et al. 2024 Figs. 5, 7, 8a) and, when the run names
SentEval's directory, the seven STS tasks. ``train_run`` is the whole of it; ``gradlab.experiments._worker``
gives it a build directory and commits what it writes.

Like the worker, this module imports no JAX (nor NumPy) at import time. Loaded models, token ids and
compiled forwards are kept per process (``CACHE``), as a worker trains many runs in turn.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from gradlab import defaults
from gradlab.experiments._spec import RunSpec

__all__ = ["train_run", "holdout_split", "cached", "CACHE", "HOLDOUT_SEED", "HELDOUT_TAUS", "HELDOUT_LAMBDAS",
           "HELDOUT_COS_BINS"]

#: The held-out split is the same for every run (it depends on the corpus only).
HOLDOUT_SEED = 20240611
HELDOUT_TAUS = defaults.TAUS  # Li et al. 2024 Figs. 3 and 7
HELDOUT_LAMBDAS = defaults.LEMMA1_LAMS  # Li et al. 2024 Fig. 8a
HELDOUT_COS_BINS = 200  # Fig. 5: cosine bins 0.01 wide over [-1, 1], so the narrow positive peak spans several
_MONITOR_KEYS = ("mu_pos", "mu_neg", "sigma_pos", "sigma_neg", "cos_pos_mean", "cos_neg_mean", "align", "uniform",
                 "m_o", "m_r", "distance_gap")


#: Per-process memory of what runs share: loaded models, corpora, token ids, compiled forwards.
CACHE: dict[Any, Any] = {}


def train_run(spec: RunSpec, build: Path) -> dict[str, Any]:
    """Train the run in ``build``, then analyze its held-out sentences before and after (and score it on
    SentEval's STS tasks when the spec names them): its result, what ``result.json`` holds."""
    encoder, sentences, token_ids, held_ids = _inputs(spec)
    res = _trainer(spec, encoder, sentences, token_ids, build)
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

    data = cached(("senteval", spec.senteval_sha256), lambda: load_senteval(spec.senteval, STS_TASKS))
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
    sample = None if spec.max_sentences is None else (spec.max_sentences, spec.seed)  # all of it: one for every seed
    token_ids = cached(("tok", model, corpus, sample), lambda: encoder.token_ids(sentences))
    held = sample_sentences(heldout, spec.heldout_max, seed=0)
    held_ids = cached(("held", model, corpus), lambda: encoder.token_ids(held))
    return encoder, sentences, token_ids, held_ids


def _trainer(spec: RunSpec, encoder, sentences: list[str], token_ids, build: Path):
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


def cached(key, make):
    if key not in CACHE:
        CACHE[key] = make()
    return CACHE[key]


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

    return cached(("corpus", spec.corpus, spec.corpus_sha256, spec.holdout, spec.heldout_max), make)


def _encoder(spec):
    """The encoder a run trains: the light head (seeded) over MiniLM's tokens, MiniLM or a checkpoint
    with the run's pooling (loaded once per process), or the trainer's recipe encoder (its MLP seeded)."""
    from gradlab.real import load_encoder
    from gradlab.real.hf import load_minilm
    from gradlab.real.light import light_from_minilm
    from gradlab.real.run import encoder_for

    if spec.encoder == "light":
        return light_from_minilm(cached("minilm", load_minilm), seed=spec.seed, dropout=spec.dropout)
    config = spec.train_config()
    if spec.recipe is not None:
        return encoder_for(config, None)
    # train() never modifies the encoder's params
    return cached(("transformer", spec.encoder, spec.encoder_sha256, spec.pooling),
                   lambda: load_encoder(spec.encoder, **config.encoder_options))


def _views(encoder, params, token_ids, batch_size: int, seed: int):
    """Two dropout views (h, h') of the held-out sentences, in batches of ``batch_size``: the trainer's
    ``views_fn``, batch b keyed by ``fold_in(key(seed + 1000003), b)``."""
    import jax
    import numpy as np

    from gradlab.real.packing import pad_ids
    from gradlab.real.step import views_fn

    # one compiled forward per architecture (the forward passes without weights: all it reads of the encoder)
    architecture = getattr(encoder, "architecture", None)
    views = (jax.jit(views_fn(encoder, packed=False)) if architecture is None
             else cached(("views", architecture), lambda: jax.jit(views_fn(architecture, packed=False))))
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
