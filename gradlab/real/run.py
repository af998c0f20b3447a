"""A training run resolved once, at the edge: what a user gave (a :class:`TrainConfig`, and
optionally a loaded encoder or the sentences) turned into the objects every stage uses.

:func:`resolve_run` builds the trained objective (a registered, composed or user loss, or a
Rho et al. 2023 transform of InfoNCE), the encoder (the recipe's two views, the one given, or
``load_encoder(config.encoder)``), the training sentences and their token ids, and the STS-B
dev scorer (the dev set tokenized and packed once); :class:`Run` carries them, frozen. The
trainer (:func:`gradlab.real.train`), :func:`gradlab.real.plan.plan` and the experiment worker
take a :class:`Run` and resolve nothing again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from gradlab.real.batches import training_data
from gradlab.real.config import TrainConfig
from gradlab.real.encoders import load_encoder

__all__ = ["Run", "resolve_run", "resolve_objective", "encoder_for", "dev_pairs", "dev_scorer", "test_scorer",
           "sts_scorer"]


@dataclasses.dataclass(frozen=True)
class Run:
    """A resolved run (:func:`resolve_run`).

    Attributes:
      config: the run's configuration.
      loss: the trained objective, ``loss(h, h_prime) -> scalar``.
      encoder: the encoder trained (its ``params`` are the starting point, never modified).
      sentences: the training sentences (empty when ``config.stream``).
      token_ids: their token ids (None when ``config.stream``).
      dev: ``params -> STS-B dev Spearman × 100`` (:func:`dev_scorer`).
      test: ``params -> STS-B test Spearman × 100`` (:func:`test_scorer`), or None.
    """

    config: TrainConfig
    loss: Callable
    encoder: Any
    sentences: list[str]
    token_ids: Sequence[Sequence[int]] | None
    dev: Callable[[Any], float]
    test: Callable[[Any], float] | None = None


def resolve_run(config: TrainConfig, *, encoder: Any = None, sentences: Sequence[str] | None = None,
                token_ids: Sequence[Sequence[int]] | None = None) -> Run:
    """The :class:`Run` of ``config``: each of its parts built once.

    Args:
      config: the run's :class:`TrainConfig`.
      encoder: an already loaded encoder (default: :func:`encoder_for` loads it).
      sentences: training sentences (default: the corpus named in ``config``, sampled).
      token_ids: ``encoder.token_ids(sentences)`` if already computed (many runs sharing a
        corpus tokenize it once); must match ``sentences`` after sampling.
    """
    loss = resolve_objective(config)
    encoder = encoder_for(config, encoder)
    sentences, token_ids = training_data(config, encoder, sentences, token_ids)
    return Run(config, loss, encoder, sentences, token_ids, dev_scorer(config, encoder), test_scorer(config, encoder))


def resolve_objective(config: TrainConfig) -> Callable:
    """The trained loss: the registered / composed / user loss, or a Rho et al. 2023 transform of InfoNCE."""
    if config.transform is None:
        from gradlab.design import resolve_loss

        return resolve_loss(config.loss, params=config.loss_params, symmetric=config.symmetric)
    from gradlab.losses import apply_transform

    return apply_transform(config.transform, symmetric=config.symmetric, **dict(config.loss_params))


def encoder_for(config: TrainConfig, encoder):
    """The encoder trained: the recipe's two views, the one given, or ``load_encoder(config.encoder,
    **config.encoder_options)``, starting from ``config.init_params`` when set, its training forward
    recomputing layers iff ``config.remat``."""
    if config.recipe:
        encoder = _recipe_encoder(config, encoder)
    elif encoder is None:  # the light encoder takes its dim from the parameters file
        return _with_remat(load_encoder(config.encoder, seed=config.seed, params=config.init_params,
                                        **dict(config.encoder_options)), config.remat)
    if config.init_params is not None:
        encoder = _with_params(encoder, config.init_params)
    return _with_remat(encoder, config.remat)


def _with_params(encoder, path: str):
    """A copy of ``encoder`` whose trained parameters are the file's (the given encoder is not modified)."""
    from gradlab.real.checkpoints import load_params

    if hasattr(encoder, "train_view"):  # a recipe's encoder trains its train view
        return dataclasses.replace(encoder, train_view=_with_params(encoder.train_view, path))
    return dataclasses.replace(encoder, params=load_params(path, encoder.params))


def _with_remat(encoder, remat: bool):
    """``encoder`` whose training forward recomputes its layers iff ``remat`` (transformers only)."""
    if hasattr(encoder, "train_view"):  # a recipe's encoder trains its train view
        return dataclasses.replace(encoder, train_view=_with_remat(encoder.train_view, remat))
    if getattr(encoder, "remat", remat) != remat:
        return dataclasses.replace(encoder, remat=remat)
    return encoder


def _recipe_encoder(config: TrainConfig, encoder):
    """The recipe's two-view encoder, of ``encoder``'s checkpoint (default: ``config.encoder``)."""
    from gradlab.real.recipe import SimCSEUnsup, simcse_unsup_encoder

    if isinstance(encoder, SimCSEUnsup):
        return encoder
    source = getattr(encoder, "source", None) if encoder is not None else None
    return simcse_unsup_encoder(source or config.encoder, seed=config.seed,
                                pooling=config.encoder_options.get("pooling", "cls"))


def dev_pairs(config: TrainConfig):
    """STS-B dev (its first ``dev_pairs`` pairs)."""
    from gradlab.real.data import STSPairs, load_stsb

    dev = load_stsb("dev")
    if config.dev_pairs is None:
        return dev
    k = config.dev_pairs
    return STSPairs(dev.sentence1[:k], dev.sentence2[:k], dev.score[:k], dev.genre[:k])


def sts_scorer(encoder, pairs) -> Callable[[Any], float]:
    """``params -> Spearman × 100`` of ``encoder`` on STS ``pairs`` (:func:`gradlab.real.stsb.stsb_scorer`):
    the sentences tokenized and packed once, each evaluation only embeds and ranks."""
    from gradlab.real.stsb import stsb_scorer

    prepare = getattr(encoder, "embedder", None)
    if prepare is None:
        def prepare(sentences):
            return lambda params: encoder.encode(sentences, params=params)
    return stsb_scorer(prepare, pairs)


def dev_scorer(config: TrainConfig, encoder) -> Callable[[Any], float]:
    """``params -> STS-B dev Spearman × 100`` of the run (its first ``config.dev_pairs`` pairs)."""
    return sts_scorer(encoder, dev_pairs(config))


def test_scorer(config: TrainConfig, encoder) -> Callable[[Any], float] | None:
    """``params -> STS-B test Spearman × 100``, the test set prepared at its first use (a run scores it
    before training and with its best parameters); None when ``config.eval_test`` is off."""
    if not config.eval_test:
        return None
    prepared = []

    def score(params: Any) -> float:
        if not prepared:
            from gradlab.real.data import load_stsb

            prepared.append(sts_scorer(encoder, load_stsb("test")))
        return prepared[0](params)

    return score
