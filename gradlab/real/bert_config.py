"""What a checkpoint's ``config.json`` and pooling files say: :class:`BertConfig` (the
architecture the forward pass reads) and :class:`PoolingConfig` (how token states become a
sentence vector: SimCSE's poolings, Gao et al. 2021, and sentence-transformers')."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["BertConfig", "PoolingConfig", "MODEL_TYPES", "POOLINGS"]

MODEL_TYPES = ("bert", "roberta")
POOLINGS = ("cls", "cls_before_pooler", "avg", "avg_first_last", "avg_top2", "max", "mean_sqrt_len")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of a HF BERT ``config.json`` that the forward pass uses."""

    vocab_size: int = 30522
    hidden_size: int = 384
    num_hidden_layers: int = 6
    num_attention_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    hidden_act: str = "gelu"
    model_type: str = "bert"
    pad_token_id: int = 0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        """The config of a HF ``config.json``; ``model_type`` must be one of :data:`MODEL_TYPES`."""
        model_type = d.get("model_type", "bert")
        if model_type not in MODEL_TYPES:
            raise ValueError(f"unsupported model_type {model_type!r}; supported: {', '.join(MODEL_TYPES)}")
        if d.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported position_embedding_type {d['position_embedding_type']!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def position_offset(self) -> int:
        """Position id of a sentence's first token: 0 for BERT, ``pad_token_id + 1`` for RoBERTa.

        RoBERTa (HF ``create_position_ids_from_input_ids``) numbers real tokens
        ``padding_idx + 1, padding_idx + 2, ...`` and gives padding ``padding_idx``.
        """
        return self.pad_token_id + 1 if self.model_type == "roberta" else 0

    @property
    def max_positions(self) -> int:
        """The longest sequence the position table holds (512 for BERT-base and RoBERTa-base)."""
        return self.max_position_embeddings - self.position_offset


@dataclasses.dataclass(frozen=True)
class PoolingConfig:
    """How token states become one sentence vector: ``mode`` (one of :data:`POOLINGS`), ``normalize``.

    SimCSE's poolings (Gao et al. 2021), with h^l the output of transformer layer l
    (l = 1..n; transformers' ``hidden_states[l]``, ``hidden_states[0]`` being the embeddings)
    and the means taken over the attention mask:

    - ``cls``: tanh(W_p h^n_CLS + b_p), BERT's pooler (transformers' ``pooler_output``);
      needs the checkpoint's ``pooler.dense`` weights.
    - ``cls_before_pooler``: h^n at position 0.
    - ``avg``: mean over tokens of h^n.
    - ``avg_first_last``: mean over tokens of (h^1 + h^n) / 2 — the first transformer
      layer's output, not the embeddings, as in SimCSE's ``simcse/models.py``.
    - ``avg_top2``: mean over tokens of (h^{n-1} + h^n) / 2.

    and sentence-transformers' ``max`` (masked maximum of h^n) and ``mean_sqrt_len``
    (sum of h^n over tokens divided by sqrt(tokens)). Sentence-transformers' ``mean`` is
    ``avg`` and its CLS-token pooling is ``cls_before_pooler``. With ``normalize`` the
    vector is divided by its L2 norm (sentence-transformers' ``Normalize`` module).

    Examples:
      >>> PoolingConfig("mean")
      PoolingConfig(mode='avg', normalize=True)
      >>> PoolingConfig("avg_top2", normalize=False).layers
      'top2'
    """

    mode: str = "avg"
    normalize: bool = True

    def __post_init__(self):
        mode = "avg" if self.mode == "mean" else self.mode
        if mode not in POOLINGS:
            raise ValueError(f"unknown pooling {self.mode!r}; choose from {', '.join(POOLINGS)}")
        object.__setattr__(self, "mode", mode)

    @property
    def layers(self) -> str:
        """Which token states the pooling reads: ``"last"``, ``"first_last"`` or ``"top2"``."""
        return {"avg_first_last": "first_last", "avg_top2": "top2"}.get(self.mode, "last")

    @property
    def first_token(self) -> bool:
        """Whether the pooling reads the first token's state alone (``cls``, ``cls_before_pooler``)."""
        return self.mode in ("cls", "cls_before_pooler")

    @classmethod
    def from_files(cls, pooling: dict[str, Any], modules: list[dict[str, Any]] | None) -> PoolingConfig:
        """From sentence-transformers' ``1_Pooling/config.json`` and ``modules.json``."""
        modes = [m for m, key in _ST_MODES.items() if pooling.get(key)]
        if len(modes) != 1:
            raise ValueError(f"expected exactly one pooling mode in the pooling config, found {modes}")
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in (modules or []))
        return cls(modes[0], normalize)

    def to_files(self, dim: int) -> dict[str, Any]:
        """The files that record this pooling in a saved model folder (name -> JSON content).

        ``gradlab_pooling.json`` always (what :func:`gradlab.real.hf.load_transformer` reads
        first); sentence-transformers' ``modules.json`` (Transformer, Pooling and, with
        ``normalize``, Normalize) and ``1_Pooling/config.json`` where it has the mode
        (``cls_before_pooler``, ``avg``, ``max``, ``mean_sqrt_len``), so that it pools the same
        way. ``cls`` (BERT's pooler), ``avg_first_last`` and ``avg_top2`` have no
        sentence-transformers Pooling mode: sentence-transformers then warns and takes mean pooling.

        Examples:
          >>> sorted(PoolingConfig("cls_before_pooler", False).to_files(768))
          ['1_Pooling/config.json', 'gradlab_pooling.json', 'modules.json']
        """
        files: dict[str, Any] = {"gradlab_pooling.json": {"mode": self.mode, "normalize": self.normalize}}
        key = _ST_MODES.get(self.mode)
        if key is None:
            return files
        files["1_Pooling/config.json"] = {"word_embedding_dimension": int(dim),
                                          **{k: k == key for k in _ST_MODES.values()},
                                          "pooling_mode_weightedmean_tokens": False, "pooling_mode_lasttoken": False}
        modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if self.normalize:
            modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                            "type": "sentence_transformers.models.Normalize"})
        files["modules.json"] = modules
        return files


#: Sentence-transformers' Pooling modes: gradlab's name -> the key of ``1_Pooling/config.json``.
_ST_MODES = {"cls_before_pooler": "pooling_mode_cls_token", "avg": "pooling_mode_mean_tokens",
             "max": "pooling_mode_max_tokens", "mean_sqrt_len": "pooling_mode_mean_sqrt_len_tokens"}
