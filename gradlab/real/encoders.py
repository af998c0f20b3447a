"""One encoder interface and one loader: ``load_encoder("minilm" | "light" | PATH)``.

Every encoder the training loop (:func:`gradlab.real.train`) and the STS-B evaluation use
satisfies :class:`Encoder`: the trainable ``params``, a ``frozen`` part passed alongside, a
pure ``forward`` for the two dropout views of SimCSE (Gao et al. 2021), tokenization, and
``encode`` for evaluation. Transformer encoders also satisfy :class:`PackedEncoder` (their
training batches are packed, :class:`gradlab.real.minilm.Packed`).

Implementations: :class:`gradlab.real.minilm.MiniLM` (all-MiniLM-L6-v2 and any BERT or
RoBERTa checkpoint) and :class:`gradlab.real.light.LightEncoder`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from gradlab.real import ENCODERS

__all__ = ["Encoder", "PackedEncoder", "load_encoder", "checkpoint_sha256"]


@runtime_checkable
class Encoder(Protocol):
    """What training and evaluation need from a sentence encoder.

    Attributes:
      params: the trainable pytree (the optimizer's state follows its structure).
      frozen: the non-trained arrays ``forward`` needs (None if there are none); passed
        as an argument so that a jitted step does not bake them in as constants.
      max_seq_length: truncation length in tokens.
      dim: embedding dimension D.

    Optional: ``architecture``, a hashable value without arrays that has the encoder's
    ``forward`` (``forward_packed`` and ``compute_params`` where the encoder has them), equal for
    two encoders whose forwards are the same function of their arguments. The runs of one process
    whose encoders have equal architectures share their compiled training step
    (:func:`gradlab.real.step.step_programs`); without one (or None) each run compiles its own.
    """

    params: Any

    @property
    def frozen(self) -> Any: ...

    @property
    def dim(self) -> int: ...

    max_seq_length: int

    def forward(self, params: Any, frozen: Any, input_ids: Any, attention_mask: Any, key: Any = None) -> Any:
        """Embeddings (B, D) of a padded batch; dropout iff ``key`` is given. Pure, jittable."""
        ...

    def token_ids(self, sentences: Sequence[str]) -> list[list[int]]:
        """Unpadded token ids, truncated to ``max_seq_length``."""
        ...

    def tokenize(self, sentences: Sequence[str], pad_to: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), both (B, L) int32, right-padded."""
        ...

    def encode(self, sentences: Sequence[str], *, batch_size: int = ..., params: Any = None) -> np.ndarray:
        """Eval-mode embeddings (N, D) float32 (``params`` default: the encoder's own)."""
        ...


@runtime_checkable
class PackedEncoder(Encoder, Protocol):
    """An :class:`Encoder` whose training batches are packed sentences (no padding)."""

    def pack(self, token_ids: Sequence[Sequence[int]], *, rows: int, width: int) -> Any:
        """All of ``token_ids`` as one packed batch of (rows, width), slots in input order."""
        ...

    def forward_packed(self, params: Any, frozen: Any, packed: Any, key: Any = None) -> Any:
        """Embeddings (S, D) of a packed batch; dropout iff ``key`` is given. Pure, jittable."""
        ...


def load_encoder(spec: str | Path, *, pooling: str | None = None, normalize: bool | None = None,
                 dtype: Any = None, seed: int = 0, path: str | Path | None = None, params: str | Path | None = None,
                 **kwargs: Any) -> Encoder:
    """An encoder by name or from a checkpoint path.

    Args:
      spec: ``"minilm"`` (all-MiniLM-L6-v2), ``"light"`` (:mod:`gradlab.real.light`), or the
        path of a BERT / RoBERTa checkpoint: a HF-layout directory (``config.json``,
        ``model.safetensors`` or sharded weights, ``tokenizer.json``) or a
        sentence-transformers directory or zip (see
        :func:`gradlab.real.minilm.load_transformer`).
      pooling: transformer encoders: one of :data:`gradlab.real.minilm.POOLINGS` (SimCSE's
        ``cls``, ``cls_before_pooler``, ``avg``, ``avg_first_last``, ``avg_top2``, and
        sentence-transformers' ``max``, ``mean_sqrt_len``); None keeps the model's own
        (MiniLM: mean) or ``avg`` for a plain HF checkpoint.
      normalize: transformer encoders: L2-normalize the embeddings; None: MiniLM's
        sentence-transformers ``Normalize`` (True), False for a plain HF checkpoint.
      dtype: parameter and compute dtype, ``jnp.float32`` (None) or ``jnp.bfloat16``.
      seed: seeds the light encoder's projection.
      path: ``"minilm"`` / ``"light"``: another sentence-transformers model than the shipped one.
      params: a parameters file (``OUT/best_params.npz`` of ``gradlab train``,
        :func:`gradlab.real.checkpoints.save_params`) that replaces the loaded parameters; the
        light encoder takes its ``dim`` from it.
      **kwargs: light encoder options (``dim``, ``dropout``, ``max_seq_length``).

    Returns:
      An :class:`Encoder`.

    Raises:
      ValueError: an unknown name, a nonexistent path, options the encoder does not take,
        or a defective checkpoint (one line naming the problem).

    Examples:
      >>> enc = load_encoder("path/to/bert-base-uncased", pooling="avg_first_last")  # doctest: +SKIP
      >>> enc.encode(["A man is playing a guitar."]).shape  # doctest: +SKIP
      (1, 768)
      >>> load_encoder("path/to/nothing")
      Traceback (most recent call last):
      ...
      ValueError: unknown encoder 'path/to/nothing': neither minilm, light nor an existing path
    """
    import jax.numpy as jnp

    from gradlab.real.hf import load_transformer
    from gradlab.real.sources import model_zip_path

    if params is not None:
        from gradlab.real.checkpoints import read_params, unflatten_params

        flat = read_params(params)
        if str(spec) == "light":
            if "w" not in flat:
                raise ValueError(f"{str(params)!r} holds no light-encoder parameters (no 'w')")
            kwargs.setdefault("dim", int(flat["w"].shape[1]))
        encoder = load_encoder(spec, pooling=pooling, normalize=normalize, dtype=dtype, seed=seed, path=path,
                               **kwargs)
        encoder.params = unflatten_params(flat, encoder.params)
        return encoder
    dtype = jnp.float32 if dtype is None else dtype
    name = str(spec)
    if name == "light":
        if pooling is not None or normalize is not None:
            raise ValueError("the light encoder takes no pooling / normalize (it mean-pools token embeddings)")
        from gradlab.real.light import load_light

        return load_light(path, seed=seed, dtype=dtype, **kwargs)
    if kwargs:
        raise ValueError(f"{name if name == 'minilm' else 'a checkpoint'} takes no options {sorted(kwargs)}")
    if name == "minilm":
        src = model_zip_path() if path is None else Path(path)
    else:
        src = Path(spec)
        if not src.exists():
            raise ValueError(f"unknown encoder {name!r}: neither {', '.join(ENCODERS)} nor an existing path")
    return load_transformer(src, pooling=pooling, normalize=normalize, dtype=dtype)


def checkpoint_sha256(path: str | Path) -> str:
    """The SHA-256 of a checkpoint's content: every file of a directory (by relative path, size and
    bytes, in sorted order) or the bytes of a zip. It names a checkpoint wherever it lies.

    Computed once per process for a checkpoint whose files (names, sizes, modification times)
    have not changed since: a study names each of its runs' checkpoint many times.

    Examples:
      >>> import tempfile; d = Path(tempfile.mkdtemp()); _ = (d / "config.json").write_text("{}")
      >>> checkpoint_sha256(d) == checkpoint_sha256(str(d))
      True
    """
    src = Path(path)
    if not src.exists():
        raise ValueError(f"no checkpoint at {src}")
    files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
    names = [f.relative_to(src).as_posix() if src.is_dir() else "" for f in files]
    stats = [f.stat() for f in files]
    state = (str(src.resolve()), tuple((n, st.st_size, st.st_mtime_ns) for n, st in zip(names, stats, strict=True)))
    if state not in _DIGESTS:
        _DIGESTS[state] = _digest(files, names, [st.st_size for st in stats])
    return _DIGESTS[state]


#: checkpoint_sha256's digests by (path, the files' names, sizes and modification times).
_DIGESTS: dict[tuple, str] = {}


def _digest(files: list[Path], names: list[str], sizes: list[int]) -> str:
    import hashlib

    digest = hashlib.sha256()
    for f, name, size in zip(files, names, sizes, strict=True):
        digest.update(f"{name}\0{size}\0".encode())
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()
