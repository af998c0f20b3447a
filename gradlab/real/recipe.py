"""SimCSE's unsupervised recipe (Gao et al. 2021): ``TrainConfig(recipe="simcse-unsup")``,
``gradlab train --recipe simcse-unsup``.

The recipe's numbers live in :mod:`gradlab.defaults` (``SIMCSE_*``):

- training: an MLP (dense + tanh) over the [CLS] token state, two dropout views (p = 0.1,
  hidden and attention), sentences truncated to 32 tokens, InfoNCE with τ = 0.05 (any
  gradlab loss may replace it), batch size and learning rate of Table A.1 by model type
  and size (hidden size 1024: large; anything else: base);
- evaluation: the [CLS] token state without the MLP (``cls_before_pooler``), sentences not
  truncated, STS-B dev every 250 steps, the best checkpoint kept;
- one epoch over a one-sentence-per-line corpus (``wiki1m_for_simcse.txt``).

The MLP starts from the checkpoint's pooler (``pooler.dense``) when it has one, else from
BERT's initialization (normal, σ = ``initializer_range`` 0.02, zero bias) seeded by the
run's seed. As SimCSE does for evaluation, the MLP is dropped from the saved model:
``OUT/model/`` holds the encoder and the source checkpoint's own pooler, unchanged, and records
the evaluation pooling (``cls_before_pooler``);
the trained MLP stays in ``OUT/best_params.npz`` (``pooler/w``, ``pooler/b``).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from gradlab import defaults

__all__ = ["RECIPES", "SimCSEUnsup", "simcse_unsup_encoder", "simcse_unsup_lr",
           "simcse_unsup_settings",
           "model_size"]

RECIPES = ("simcse-unsup",)


def model_size(hidden_size: int) -> str:
    """``"large"`` for hidden size 1024 (BERT-large, RoBERTa-large), else ``"base"``.

    Examples:
      >>> model_size(768), model_size(1024), model_size(32)
      ('base', 'large', 'base')
    """
    return "large" if int(hidden_size) == 1024 else "base"


def _source_config(encoder: str | Path) -> dict[str, Any]:
    """``config.json`` of a checkpoint path (directory or zip) or of ``"minilm"``."""
    from gradlab.real.sources import checkpoint_reader, model_zip_path

    src = model_zip_path() if str(encoder) == "minilm" else Path(encoder)
    if str(encoder) == "light" or not src.exists():
        raise ValueError(f"the simcse-unsup recipe needs a BERT / RoBERTa checkpoint; got encoder {str(encoder)!r}")
    try:
        return json.loads(checkpoint_reader(src)("config.json").decode("utf-8"))
    except KeyError:
        raise ValueError(f"config.json missing from the model at {src}") from None


def simcse_unsup_settings(encoder: str | Path, corpus: str | Path, *, batch_size: int | None = None) -> dict[str, Any]:
    """The recipe's training settings for a checkpoint and a corpus (Gao et al. 2021, App. A).

    Returns:
      ``batch_size``, ``lr`` (Table A.1 by model type and size), ``eval_every`` (250),
      ``steps`` (one epoch: corpus lines // batch size, at least 1), ``tau`` (0.05),
      ``max_seq_length`` (32), ``dropout`` (0.1), ``size`` and ``model_type``.
    """
    from gradlab.real.data import count_lines

    key = _table_key(encoder)
    batch = int(batch_size or defaults.SIMCSE_UNSUP_BATCH_SIZE[key])
    lines = count_lines(corpus)
    return {"batch_size": batch, "lr": defaults.SIMCSE_UNSUP_LR[key], "eval_every": defaults.SIMCSE_EVAL_EVERY,
            "steps": max(1, defaults.SIMCSE_EPOCHS * lines // batch), "tau": defaults.SIMCSE_TAU,
            "max_seq_length": defaults.SIMCSE_MAX_SEQ_LENGTH, "dropout": defaults.SIMCSE_DROPOUT,
            "model_type": key[0], "size": key[1], "lines": lines}


@dataclasses.dataclass
class SimCSEUnsup:
    """An encoder that trains one way and evaluates another (a :class:`gradlab.real.PackedEncoder`).

    Attributes:
      train_view: the MiniLM the steps use: pooling ``cls`` (the MLP is ``params["pooler"]``),
        32-token truncation, dropout 0.1.
      eval_view: the MiniLM ``encode`` uses: ``cls_before_pooler``, no extra truncation.
    """

    train_view: Any
    eval_view: Any

    @property
    def params(self) -> dict:
        return self.train_view.params

    @property
    def frozen(self) -> None:
        return None

    @property
    def dim(self) -> int:
        return self.train_view.dim

    @property
    def max_seq_length(self) -> int:
        return self.train_view.max_seq_length

    @property
    def source(self) -> Path | None:
        return self.eval_view.source

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        return self.train_view.token_ids(sentences)

    def tokenize(self, sentences: Sequence[str], pad_to: int | None = None):
        return self.train_view.tokenize(sentences, pad_to)

    @property
    def architecture(self) -> Any:
        """The training view's (:attr:`gradlab.real.minilm.MiniLM.architecture`): the steps train it."""
        return self.train_view.architecture if type(self) is SimCSEUnsup else None

    def compute_params(self, params, dtype):
        return self.train_view.compute_params(params, dtype)

    def forward(self, params, frozen, input_ids, attention_mask, key=None):
        return self.train_view.forward(params, frozen, input_ids, attention_mask, key)

    def pack(self, token_ids, *, rows: int, width: int):
        return self.train_view.pack(token_ids, rows=rows, width=width)

    def forward_packed(self, params, frozen, packed, key=None):
        return self.train_view.forward_packed(params, frozen, packed, key)

    def encode(self, sentences: Sequence[str], *, batch_size: int = 64, params: dict | None = None) -> np.ndarray:
        """Evaluation embeddings: [CLS] before the MLP (``params["pooler"]`` is unused)."""
        return self.eval_view.encode(sentences, batch_size=batch_size, params=self.params if params is None else params)

    def embedder(self, sentences: Sequence[str], *, batch_size: int = 64):
        """``params -> encode(sentences, params=params)``, the sentences prepared once."""
        return self.eval_view.embedder(sentences, batch_size=batch_size)


def simcse_unsup_encoder(encoder: str | Path, *, seed: int = 0, dtype: Any = None,
                         pooling: str = "cls") -> SimCSEUnsup:
    """The recipe's two views of a BERT / RoBERTa checkpoint (or ``"minilm"``).

    ``pooling`` is SimCSE's ``--pooler_type`` (Gao et al. 2021). ``"cls"``, the unsupervised
    recipe's own: an MLP over [CLS] in training and [CLS] before it in evaluation; the MLP is
    the checkpoint's pooler when it has one, else drawn from BERT's initialization with
    ``seed``. Any other of :data:`gradlab.real.POOLINGS` (``"avg"``, ...): no MLP, the same
    pooling in training and evaluation.
    """
    import jax
    import jax.numpy as jnp

    from gradlab.real.bert_config import POOLINGS, PoolingConfig
    from gradlab.real.hf import load_transformer
    from gradlab.real.sources import model_zip_path

    if pooling not in POOLINGS:
        raise ValueError(f"unknown pooling {pooling!r}; choose from {', '.join(POOLINGS)}")
    _source_config(encoder)  # a transformer checkpoint, or one line
    src = model_zip_path() if str(encoder) == "minilm" else Path(encoder)
    dtype = jnp.float32 if dtype is None else dtype
    if pooling != "cls":  # SimCSE's other pooler types: no MLP, one pooling throughout
        base = load_transformer(src, pooling=pooling, normalize=False, dtype=dtype)
        return SimCSEUnsup(_training_view(base, PoolingConfig(pooling, False)), base)
    try:
        base = load_transformer(src, pooling="cls", normalize=False, dtype=dtype)
    except ValueError as exc:
        if "pooler" not in str(exc):
            raise
        base = load_transformer(src, pooling="cls_before_pooler", normalize=False, dtype=dtype)
        H = base.config.hidden_size
        std = float(_source_config(encoder).get("initializer_range", 0.02))
        w = std * jax.random.normal(jax.random.key(seed), (H, H), dtype=jnp.float32)
        base.params = {**base.params, "pooler": {"w": w.astype(dtype), "b": jnp.zeros((H,), dtype)}}
    eval_view = dataclasses.replace(base, pooling=PoolingConfig("cls_before_pooler", False))
    return SimCSEUnsup(_training_view(base, PoolingConfig("cls", False)), eval_view)


def _training_view(base, pooling):
    """``base`` as the recipe trains it: ``pooling``, dropout 0.1 (hidden and attention), sentences
    truncated to 32 tokens."""
    import tokenizers

    p = defaults.SIMCSE_DROPOUT
    config = dataclasses.replace(base.config, hidden_dropout_prob=p, attention_probs_dropout_prob=p)
    max_len = min(defaults.SIMCSE_MAX_SEQ_LENGTH, base.max_seq_length)
    tok = tokenizers.Tokenizer.from_str(base.tokenizer.to_str())
    tok.enable_truncation(max_length=max_len)
    return dataclasses.replace(base, config=config, pooling=pooling, tokenizer=tok, max_seq_length=max_len)


def simcse_unsup_lr(encoder: str | Path) -> float:
    """Table A.1's learning rate for the checkpoint's model type and size (Gao et al. 2021)."""
    return defaults.SIMCSE_UNSUP_LR[_table_key(encoder)]


def _table_key(encoder: str | Path) -> tuple[str, str]:
    """(model type, size): the column of Table A.1 (Gao et al. 2021) a checkpoint reads."""
    cfg = _source_config(encoder)
    return cfg.get("model_type", "bert"), model_size(cfg.get("hidden_size", 768))
