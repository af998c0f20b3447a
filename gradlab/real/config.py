"""The configuration of a training run: one typed record shared by the library, the CLI and the experiments.

:class:`RunConfig` holds what every run has (encoder, recipe, steps, batch size, learning rate,
evaluation and monitor periods, seed, corpus and its sample, dev pairs, test scoring) and
checks it once. :class:`TrainConfig` (``gradlab train``, :func:`gradlab.real.train`) adds the
trained objective and the trainer's options; the experiments' run spec
(``gradlab.experiments.RunSpec``) adds a canonical loss dict and the held-out analysis. The
learning-rate rule (:func:`learning_rate`) and the encoder names (``gradlab.real.ENCODERS``)
are written here once.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradlab import defaults
from gradlab.real import CORPORA, ENCODERS

__all__ = ["RunConfig", "TrainConfig", "learning_rate", "simcse_unsup_config", "train_config", "PRECISIONS"]


#: Training precisions (``TrainConfig.precision``, ``gradlab train --precision``) and the dtype
#: each computes the forward and backward pass in; the master parameters, the optimizer state,
#: the loss and the update stay float32 in every one (:func:`gradlab.real.step.make_train_step`).
PRECISIONS = {"float32": "float32", "bf16": "bfloat16"}


def learning_rate(encoder: str, lr: float | None = None, recipe: str | None = None) -> float:
    """The Adam learning rate of a run: ``lr`` if given, else the recipe's (Gao et al. 2021,
    Table A.1, by the checkpoint's type and size), else ``defaults.ENCODER_LR`` by encoder
    (a checkpoint path takes MiniLM's, SimCSE's BERT-base rate).

    Examples:
      >>> learning_rate("light"), learning_rate("minilm"), learning_rate("light", 0.01)
      (0.001, 3e-05, 0.01)
    """
    if lr is not None:
        return float(lr)
    if recipe is not None:
        from gradlab.real.recipe import simcse_unsup_lr

        return simcse_unsup_lr(encoder)
    return float(defaults.ENCODER_LR.get(str(encoder), defaults.ENCODER_LR["minilm"]))


def _integer(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}; got {value!r}")
    return int(value)


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """What every training run has, checked once.

    Attributes:
      encoder: ``"light"``, ``"minilm"`` (``gradlab.real.ENCODERS``) or the path of a BERT /
        RoBERTa checkpoint (:func:`gradlab.real.load_encoder`).
      recipe: ``"simcse-unsup"``: SimCSE's unsupervised recipe (Gao et al. 2021; see
        :mod:`gradlab.real.recipe`): an MLP over [CLS] in training, ``cls_before_pooler`` in
        evaluation, 32-token training sentences, dropout 0.1. None: the encoder as loaded.
      steps: optimizer steps.
      batch_size: N sentences per step (two dropout views each).
      lr: Adam / AdamW learning rate (None: :func:`learning_rate`).
      eval_every: steps between STS-B dev evaluations (0: only at the end).
      monitor_every: the monitor measures the states 0, 1, every this many steps and the last
        (``gradlab.real.monitor_steps``; state s is the model after s updates).
      seed: seeds the initial projection (light) or MLP (a checkpoint without pooler), the
        corpus sample, the batch order and dropout.
      corpus: ``"NewsArticles"``, ``"News100"``, or a path (zip / CSV / .txt / directory).
      max_sentences: use at most this many corpus sentences (seeded sample); None = all.
      dev_pairs: evaluate on the first this-many STS-B dev pairs (None = all 1,500).
      eval_test: also score STS-B test before training and with the best checkpoint.
      precision: ``"float32"``, or ``"bf16"``: mixed precision for GPUs. The forward and
        backward pass run in bfloat16 (parameters cast inside the jitted step); the master
        parameters, the optimizer state, the embeddings h, h' given to the loss and the
        monitor, the loss, its gradient and the update stay float32 (``PRECISIONS``).
        Evaluation scores the float32 parameters, the model that is saved.
    """

    encoder: str = "light"
    recipe: str | None = None
    steps: int = 200
    batch_size: int = 64
    lr: float | None = None
    eval_every: int = 50
    monitor_every: int = 10
    seed: int = 0
    corpus: str = "NewsArticles"
    max_sentences: int | None = None
    dev_pairs: int | None = None
    eval_test: bool = True
    precision: str = "float32"

    def __post_init__(self):
        for name, low in (("steps", 1), ("batch_size", 2), ("eval_every", 0), ("monitor_every", 1), ("seed", 0)):
            object.__setattr__(self, name, _integer(getattr(self, name), name, low))
        if self.max_sentences is not None:
            object.__setattr__(self, "max_sentences", _integer(self.max_sentences, "max_sentences", 2))
            if self.max_sentences < self.batch_size:
                raise ValueError(f"max_sentences={self.max_sentences} is smaller than batch_size={self.batch_size}")
        if self.dev_pairs is not None:
            object.__setattr__(self, "dev_pairs", _integer(self.dev_pairs, "dev_pairs", 10))
        if self.lr is not None:
            if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not (
                    math.isfinite(self.lr) and self.lr > 0):
                raise ValueError(f"lr must be a finite number > 0; got {self.lr!r}")
            object.__setattr__(self, "lr", float(self.lr))
        object.__setattr__(self, "eval_test", bool(self.eval_test))
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; choose from {', '.join(PRECISIONS)}")
        if not isinstance(self.encoder, str) or (self.encoder not in ENCODERS and not Path(self.encoder).exists()):
            raise ValueError(f"unknown encoder {self.encoder!r}: neither {', '.join(ENCODERS)} nor an existing path")
        if self.recipe is not None:
            from gradlab.real.recipe import RECIPES

            if self.recipe not in RECIPES:
                raise ValueError(f"unknown recipe {self.recipe!r}; choose from {', '.join(RECIPES)}")
            if self.encoder == "light":
                raise ValueError("the simcse-unsup recipe needs a transformer encoder (minilm or a checkpoint path)")

    @property
    def learning_rate(self) -> float:
        """The learning rate the run trains with (:func:`learning_rate`)."""
        return learning_rate(self.encoder, self.lr, self.recipe)


@dataclasses.dataclass(frozen=True)
class TrainConfig(RunConfig):
    """What a training run does: a :class:`RunConfig` and the trained objective.

    The fields of :class:`RunConfig` (encoder, recipe, steps, batch_size, lr, eval_every,
    monitor_every, seed, corpus, max_sentences, dev_pairs, eval_test, precision), and:

    Attributes:
      loss: a registered loss name (``gradlab.list_losses()``), any text
        ``gradlab.resolve_loss`` reads (``"compose:gd=...,weight=...,ratio=..."``,
        ``"path/to/file.py:function"``, ``"module:function"``), or a ``gradlab.Loss``
        (e.g. from ``gradlab.loss_from_cosines`` or ``gradlab.compose``).
      loss_params: parameters of the loss (override a ``Loss``'s own).
      symmetric: average both directions of the loss.
      monitor: attach a ParadigmMonitor if ``gradlab.monitor`` is importable.
      fixed_length: light encoder: pad every batch to the corpus-wide length bucket (one
        compilation per run; the default, None) instead of the batch's own bucket. MiniLM
        packs each batch's sentences into rows of one shape per run (no padding to speak of).
      transform: a Rho et al. 2023 gradient-scaling transform (``gradlab.losses.TRANSFORMS``:
        emphasize, curvature, ratio, attenuate_i, attenuate_ii, margins, none). The trained
        objective is then ``gradlab.losses.apply_transform(transform, **loss_params)``, the
        generalized InfoNCE with its gradient rescaled (Eqs. 8–12, Algorithms 3–6); ``loss``
        must stay ``"infonce"``, which the monitor watches at the same τ.
      weight_decay: decoupled weight decay; > 0 trains with AdamW (``optax.adamw``), 0 with Adam.
      save_state_every: write the training state (parameters, optimizer state, step,
        best-so-far, PRNG key, batch order) to ``OUT/state/state.npz`` every this many steps
        (0: never), atomically; ``train(..., resume=True)`` continues from it.
      stream: read ``corpus`` (a one-sentence-per-line file) lazily through a shuffle buffer
        of ``shuffle_buffer`` lines seeded by ``seed`` (:func:`gradlab.real.data.stream_lines`),
        tokenizing each batch as it comes, so that memory does not grow with the corpus.
        Every batch then takes ``batch_size`` rows of the encoder's full length (no packing).
      shuffle_buffer: lines held by the stream's shuffle buffer (None: 10,000).
      encoder_options: options of :func:`gradlab.real.load_encoder` for ``encoder``: ``pooling``
        (transformers; with the recipe, SimCSE's ``--pooler_type``: ``cls``, its default, trains an
        MLP over [CLS]; any other pooling trains and evaluates with that pooling, no MLP),
        ``dim`` and ``dropout`` (light).
      init_params: a parameters file (``OUT/best_params.npz`` of an earlier run) the encoder
        starts from instead of its checkpoint's weights.
      remat: transformer encoders recompute each layer's activations in the backward pass
        instead of storing them (keeping only the dropout masks): less memory for a large
        batch or a long sequence, about a third more forward compute; the same numbers.

    With ``recipe="simcse-unsup"`` the corpus is read one sentence per line;
    :func:`simcse_unsup_config` fills in the recipe's batch size, learning rate, evaluation
    interval, epoch length and τ.
    """

    loss: Any = "infonce"
    loss_params: Mapping[str, float] = dataclasses.field(default_factory=dict)
    symmetric: bool = False
    monitor: bool = True
    fixed_length: bool | None = None
    transform: str | None = None
    weight_decay: float = 0.0
    save_state_every: int = 0
    stream: bool = False
    shuffle_buffer: int | None = None
    remat: bool = False
    encoder_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    init_params: str | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "encoder_options", dict(self.encoder_options))
        unknown = sorted(set(self.encoder_options) - {"pooling", "dim", "dropout"})
        if unknown:
            raise ValueError(f"unknown encoder options {unknown}; choose from pooling, dim, dropout")
        light_only = sorted({"dim", "dropout"} & set(self.encoder_options))
        if light_only and self.encoder != "light":
            raise ValueError(f"{', '.join(light_only)}: light encoder options; the encoder is {self.encoder!r}")
        if "pooling" in self.encoder_options:
            from gradlab.real.bert_config import POOLINGS

            if self.encoder == "light":
                raise ValueError("pooling applies to transformer encoders (minilm or a checkpoint path), not light")
            if self.encoder_options["pooling"] not in POOLINGS:
                raise ValueError(f"unknown pooling {self.encoder_options['pooling']!r}; choose from {', '.join(POOLINGS)}")
        if self.init_params is not None:
            if not Path(self.init_params).is_file():
                raise ValueError(f"init_params: no parameters file at {self.init_params!r}")
            object.__setattr__(self, "init_params", str(self.init_params))
        if self.transform is not None and self.loss != "infonce":
            raise ValueError(f"a transform rescales InfoNCE's gradient: loss must be 'infonce'; got {self.loss!r}")
        object.__setattr__(self, "save_state_every", _integer(self.save_state_every, "save_state_every", 0))
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay)
                and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0; got {self.weight_decay!r}")
        if self.stream and (self.corpus in CORPORA or self.max_sentences is not None):
            raise ValueError("stream reads a one-sentence-per-line corpus file: give corpus=PATH and no max_sentences")
        if self.shuffle_buffer is not None:
            _integer(self.shuffle_buffer, "shuffle_buffer", 1)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["loss_params"] = dict(self.loss_params)
        d["encoder_options"] = dict(self.encoder_options)
        if not isinstance(self.loss, str):  # a gradlab.Loss: its name and every parameter
            d["loss"] = self.loss.name
            d["loss_params"] = {k: float(v) for k, v in {**self.loss.params, **d["loss_params"]}.items()}
        d["learning_rate"] = self.learning_rate
        return d


def simcse_unsup_config(encoder: str | Path, corpus: str | Path, **overrides: Any) -> TrainConfig:
    """A :class:`TrainConfig` of SimCSE's unsupervised recipe: its settings, then ``overrides``.

    InfoNCE at τ = 0.05 unless ``loss`` / ``loss_params`` / ``transform`` say otherwise (a
    ``tau`` not given to InfoNCE or a transform is the recipe's).

    Examples:
      >>> cfg = simcse_unsup_config("path/to/bert-base-uncased", "wiki1m_for_simcse.txt")  # doctest: +SKIP
      >>> cfg.batch_size, cfg.learning_rate, cfg.eval_every, cfg.steps  # doctest: +SKIP
      (64, 3e-05, 250, 15625)
    """
    from gradlab.real.recipe import simcse_unsup_settings

    s = simcse_unsup_settings(encoder, corpus, batch_size=overrides.get("batch_size"))
    loss = overrides.pop("loss", "infonce")
    params = dict(overrides.pop("loss_params", {}))
    if loss == "infonce" or overrides.get("transform") is not None:
        params.setdefault("tau", s["tau"])
    base = {"batch_size": s["batch_size"], "lr": s["lr"], "eval_every": s["eval_every"], "steps": s["steps"]}
    return TrainConfig(**{**base, **overrides, "loss": loss, "loss_params": params, "encoder": str(encoder),
                          "corpus": str(corpus), "recipe": "simcse-unsup"})


def train_config(*, encoder: str | Path = "light", corpus: str | Path = "NewsArticles", recipe: str | None = None,
                 loss: Any = None, compose: str | None = None, **fields: Any) -> TrainConfig:
    """The :class:`TrainConfig` of what a user gave, ``None`` meaning "the default" (what
    ``gradlab train`` calls): with ``recipe``, :func:`simcse_unsup_config` (the recipe's settings,
    then the fields given); else :class:`TrainConfig`'s own defaults. ``compose`` is a
    composition's text (``"gd=...,weight=...,ratio=..."``), given instead of ``loss``.

    Examples:
      >>> cfg = train_config(steps=None, loss="arccon", loss_params={"tau": 0.1})
      >>> cfg.steps, cfg.loss, dict(cfg.loss_params)
      (200, 'arccon', {'tau': 0.1})
      >>> train_config(compose="gd=sigmoid,weight=softmax,ratio=arccon").loss
      'compose:gd=sigmoid,weight=softmax,ratio=arccon'
    """
    given = {k: v for k, v in fields.items() if v is not None}
    if compose is not None:
        if loss is not None:
            raise ValueError("give a loss or a composition, not both")
        loss = f"compose:{compose}"
    if loss is not None:
        given["loss"] = loss
    if recipe is not None:
        from gradlab.real.recipe import RECIPES

        if recipe not in RECIPES:
            raise ValueError(f"unknown recipe {recipe!r}; choose from {', '.join(RECIPES)}")
        if str(encoder) == "light":
            raise ValueError("the simcse-unsup recipe needs a transformer encoder (minilm or a checkpoint path)")
        if str(corpus) in CORPORA:  # the studies pass their sentences; a user's run reads its corpus file
            raise ValueError("the simcse-unsup recipe reads corpus=PATH, one sentence per line (wiki1m_for_simcse.txt)")
        return simcse_unsup_config(encoder, corpus, **given)
    return TrainConfig(encoder=str(encoder), corpus=str(corpus), **given)
