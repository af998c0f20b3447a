"""A run: one training configuration, named by the hash of its canonical JSON.

A loss is named by a small dict, either a registered loss::

    {"loss": "baseline", "params": {"m": 0.3, "tau": 0.05, "r": 1.0}}

or a GD / W / R composition resolved through ``gradlab.compose``::

    {"compose": {"gd": "indicator", "weight": "softmax", "ratio": "constant"}, "params": {...}}

or a Rho et al. 2023 gradient-scaling transform of InfoNCE (``gradlab.losses.apply_transform``), its
parameters completed with the transform's defaults and τ, β::

    {"loss": "transform:emphasize", "params": {"beta": 1.0, "s": 1.125, "tau": 0.25}}

or a user's loss, read by ``gradlab.resolve_loss`` (``FILE.py:FUNCTION`` or
``module:FUNCTION``), its file named by path and content hash, so an edited file is a new
run, and a run never executes a different loss than the one its id names::

    {"user": "/abs/path/my_losses.py:focal", "sha256": "...", "params": {"tau": 0.05, "gamma": 2.0}}

A registered loss's parameters are completed with the registry defaults and written as
floats, so ``{"loss": "baseline"}`` and the same loss with its defaults spelled out are
one run (one id), run once however many studies ask for it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradlab.real import ENCODERS
from gradlab.real.config import CORPORA, RunConfig, TrainConfig

__all__ = ["RunSpec", "SCHEMA_VERSION", "TRANSFORM_PREFIX", "canonical_loss", "loss_label"]

#: Bumped whenever the meaning of a field (or what a run computes) changes: every id changes with it.
#: 2: the id hashes the gradlab version and a user loss by function name and file content, not path; the
#: monitor measures the trained loss itself, from state 0 (before the first update).
SCHEMA_VERSION = 2
#: Fields added after their schema, with the value every earlier run had: they enter the id only
#: when they differ from it, so runs named before keep their names.
_OPTIONAL = {"recipe": None, "encoder_sha256": None, "precision": "float32", "pooling": None, "corpus_sha256": None,
             "senteval": None, "senteval_sha256": None}


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ValueError(f"{what} must be a finite number; got {value!r}")
    return float(value)


def _params(raw: Any, where: str) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise TypeError(f"{where}: 'params' must be a dict of numbers; got {type(raw).__name__}")
    return {str(k): _number(v, f"{where}: parameter {k!r}") for k, v in raw.items()}


def canonical_loss(loss: Any) -> dict[str, Any]:
    """The normalized loss dict (registry defaults filled in, floats, sorted keys).

    Args:
      loss: a registered name (``"infonce"``), ``{"loss": name, "params": {...}}``,
        ``{"compose": {"gd": ..., "weight": ..., "ratio": ...}, "params": {...}}`` or
        ``{"user": "FILE.py:FUNCTION", "params": {...}}`` (the module doc).

    Returns:
      ``{"loss": name, "params": {...}}``, ``{"compose": {...}, "params": {...}}`` or
      ``{"user": ..., "sha256": ..., "params": {...}}`` (the loss's defaults filled in).

    Examples:
      >>> canonical_loss("baseline") == canonical_loss({"loss": "baseline", "params": {"r": 1}})
      True
    """
    if isinstance(loss, str):
        loss = {"loss": loss}
    if not isinstance(loss, Mapping):
        raise TypeError(f"a loss is a name or a dict with 'loss' or 'compose'; got {type(loss).__name__}")
    keys = set(loss)
    if "user" in loss:
        return _canonical_user(loss)
    if keys - {"loss", "compose", "params"} or len(keys & {"loss", "compose"}) != 1:
        raise ValueError(f"a loss dict has 'loss', 'compose' or 'user' (one of them) and optional 'params'; "
                         f"got keys {sorted(keys)}")
    if "loss" in loss:
        from gradlab.losses import get_spec

        name = loss["loss"]
        if not isinstance(name, str):
            raise TypeError(f"'loss' must be a registered name; got {name!r}")
        params = _params(loss.get("params"), f"loss {name!r}")
        if name.startswith(TRANSFORM_PREFIX):
            return _canonical_transform(name, params)
        spec = get_spec(name)  # ValueError naming the choices for an unknown name
        unknown = sorted(set(params) - set(spec.defaults))
        if unknown:
            raise ValueError(f"loss {name!r}: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(spec.defaults) or '(none)'}")
        merged = {k: float(params.get(k, v)) for k, v in spec.defaults.items()}
        return {"loss": spec.name, "params": dict(sorted(merged.items()))}
    parts = loss["compose"]
    if not isinstance(parts, Mapping) or not parts:
        raise TypeError(f"'compose' must be a non-empty dict such as {{'gd': ..., 'weight': ..., 'ratio': ...}}; got {parts!r}")
    for k, v in parts.items():
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise TypeError(f"'compose' entry {k!r} must be a name or a number; got {v!r}")
    return {"compose": dict(sorted((str(k), v) for k, v in parts.items())),
            "params": dict(sorted(_params(loss.get("params"), "compose").items()))}


#: A loss dict's ``"loss"`` naming a Rho et al. 2023 transform of InfoNCE: ``"transform:NAME"``.
TRANSFORM_PREFIX = "transform:"


def _canonical_transform(name: str, params: dict[str, float]) -> dict[str, Any]:
    """``{"loss": "transform:NAME", "params": ...}`` with the transform's defaults, τ and β filled in."""
    from gradlab import defaults
    from gradlab.losses import TRANSFORMS, apply_transform

    kind = name[len(TRANSFORM_PREFIX):]
    if kind not in TRANSFORMS:
        raise ValueError(f"unknown transform {kind!r}; valid choices: {', '.join(TRANSFORMS)}")
    base = {"tau": defaults.RHO2023_TAU, "beta": defaults.RHO2023_BETA,
            **{k: d for k, (d, _) in TRANSFORMS[kind].items()}}
    unknown = sorted(set(params) - set(base))
    if unknown:
        raise ValueError(f"loss {name!r}: unknown parameter(s) {', '.join(unknown)}; valid: {', '.join(base)}")
    merged = {k: float(params.get(k, v)) for k, v in base.items()}
    apply_transform(kind, **merged)  # a one-line ValueError for a bad value
    return {"loss": name, "params": dict(sorted(merged.items()))}


def _canonical_user(loss: Mapping[str, Any]) -> dict[str, Any]:
    keys = set(loss)
    if keys - {"user", "sha256", "params"}:
        raise ValueError(f"a user loss dict has 'user', optional 'sha256' and 'params'; got keys {sorted(keys)}")
    text = loss["user"]
    if not isinstance(text, str) or ":" not in text:
        raise ValueError(f"'user' must be FILE.py:FUNCTION or module:FUNCTION; got {text!r}")
    from gradlab.design import loss_source, resolve_loss

    text, digest = loss_source(text)
    if loss.get("sha256") not in (None, digest):
        raise ValueError(f"{text}: the file changed since this run was named (sha256 {digest[:12]}…, expected "
                         f"{str(loss['sha256'])[:12]}…)")
    resolved = resolve_loss(text, params=_params(loss.get("params"), text))  # one-line ValueError if unusable
    return {"user": text, "sha256": digest, "params": {k: float(v) for k, v in sorted(resolved.params.items())}}


def _loss_identity(loss: dict[str, Any]) -> dict[str, Any]:
    """The loss dict as hashed: a ``FILE.py:FUNCTION`` user loss becomes ``:FUNCTION`` (its file is
    named by ``sha256``), so the id does not depend on where the file lies.

    Examples:
      >>> _loss_identity({"user": "/mnt/a/l.py:focal", "sha256": "ab", "params": {}})["user"]
      ':focal'
    """
    if "user" not in loss or loss.get("sha256") is None:
        return loss
    return {**loss, "user": ":" + loss["user"].rpartition(":")[2]}


def _fmt(v: float) -> str:
    return f"{v:g}"


def loss_label(loss: Mapping[str, Any]) -> str:
    """A short human label: ``baseline(m=0.3, tau=0.05, r=1)``."""
    loss = canonical_loss(loss)
    if "user" in loss:
        head = loss["user"].rpartition(":")[2]
    elif "loss" in loss:
        head = loss["loss"]
    else:
        head = "compose(" + ", ".join(f"{k}={v}" for k, v in loss["compose"].items()) + ")"
    params = ", ".join(f"{k}={_fmt(v)}" for k, v in loss["params"].items())
    return f"{head}({params})" if params else head


@dataclasses.dataclass(frozen=True)
class RunSpec(RunConfig):
    """One run of a study: a ``gradlab.real.RunConfig`` with a canonical loss and the held-out analysis.

    Its id is the hash of everything here. The fields of ``RunConfig`` (encoder, recipe,
    steps, batch_size, lr, eval_every, monitor_every, seed, corpus, max_sentences,
    dev_pairs, eval_test, precision) mean what they mean for ``gradlab train``, with its
    defaults (a study's sizes are its ``Scale``: ``gradlab.experiments.CPU_RUN`` and the
    others), except that:

    - ``lr`` None becomes the encoder's rate (``gradlab.real.learning_rate``), written into the spec;
    - ``corpus`` is ``"NewsArticles"`` or ``"News100"``, or the path of a one-sentence-per-line
      file (SimCSE's ``wiki1m_for_simcse.txt``); ``max_sentences`` is drawn (seeded) from its
      non-held-out part (None: all of it);
    - an ``encoder`` path, a ``corpus`` file and a ``senteval`` directory are named in the id by
      their content (``encoder_sha256``, ``corpus_sha256``, ``senteval_sha256``), not their path.

    Attributes:
      loss: a loss dict (see ``canonical_loss``); normalized on construction.
      dropout: token-embedding dropout of the light encoder's views (transformers: their own 0.1).
      holdout: fraction of a named corpus held out, never trained on (the same split for every
        run); a corpus file holds out ``heldout_max`` lines (the analysis reads no more).
      heldout_max: held-out sentences analyzed before / after training (fig5, fig7, fig8a).
      pooling: a transformer encoder's pooling (``gradlab train --pooling``; with the recipe,
        SimCSE's ``--pooler_type``); None: the model's own, or the recipe's MLP over [CLS].
      senteval: SentEval's ``data/downstream`` directory: the best checkpoint and state 0 are
        also scored on the seven STS tasks (``gradlab.real.evaluate_sts``), Li et al. 2024
        Table 3's metric.
      encoder_sha256, corpus_sha256, senteval_sha256: the SHA-256 of a checkpoint ``encoder``'s
        files, of a corpus file, of the SentEval files read (filled in; None otherwise). Changed
        content is a new run.

    Examples:
      >>> a = RunSpec(loss="baseline")
      >>> a.id == RunSpec(loss={"loss": "baseline", "params": {"m": 0.3}}).id
      True
      >>> a.id == RunSpec(loss={"loss": "baseline", "params": {"m": 0.4}}).id
      False
    """

    loss: Any = "baseline"
    dropout: float = 0.1
    holdout: float = 0.1
    heldout_max: int = 1024
    pooling: str | None = None
    senteval: str | None = None
    encoder_sha256: str | None = None
    corpus_sha256: str | None = None
    senteval_sha256: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "loss", canonical_loss(self.loss))
        super().__post_init__()
        if self.corpus in CORPORA:
            if self.corpus_sha256 is not None:
                raise ValueError(f"corpus_sha256 names a corpus file's content; {self.corpus!r} is none")
        elif Path(self.corpus).is_file():
            self._name_by_content("corpus", "corpus_sha256", "the corpus file")
        else:
            raise ValueError(f"unknown corpus {self.corpus!r}: neither {', '.join(CORPORA)} nor a file "
                             "(one sentence per line)")
        if self.senteval is not None:
            self._name_by_content("senteval", "senteval_sha256", "the SentEval files")
        elif self.senteval_sha256 is not None:
            raise ValueError("senteval_sha256 names SentEval's files; senteval is None")
        if isinstance(self.heldout_max, bool) or not isinstance(self.heldout_max, numbers.Integral) \
                or self.heldout_max < self.batch_size:
            raise ValueError(f"heldout_max must be an integer >= batch_size={self.batch_size}; got {self.heldout_max!r}")
        object.__setattr__(self, "heldout_max", int(self.heldout_max))
        object.__setattr__(self, "lr", self.learning_rate)
        if not 0.0 <= _number(self.dropout, "dropout") < 1.0:
            raise ValueError(f"dropout must lie in [0, 1); got {self.dropout!r}")
        if not 0.0 < _number(self.holdout, "holdout") < 1.0:
            raise ValueError(f"holdout must lie in (0, 1); got {self.holdout!r}")
        object.__setattr__(self, "dropout", float(self.dropout))
        object.__setattr__(self, "holdout", float(self.holdout))
        if self.pooling is not None:
            self.train_config(loss="baseline")  # TrainConfig checks the pooling against the encoder
        if self.encoder in ENCODERS:
            if self.encoder_sha256 is not None:
                raise ValueError(f"encoder_sha256 names a checkpoint's files; {self.encoder!r} has none")
            return
        self._name_by_content("encoder", "encoder_sha256", "the checkpoint")

    def _name_by_content(self, field: str, digest_field: str, what: str) -> None:
        """Resolve the path in ``field`` and fill ``digest_field`` with its content's SHA-256 (checked
        against the one recorded, if any)."""
        from gradlab.real import checkpoint_sha256, senteval_sha256

        path = str(Path(getattr(self, field)).resolve())
        digest = (senteval_sha256 if field == "senteval" else checkpoint_sha256)(path)
        recorded = getattr(self, digest_field)
        if recorded not in (None, digest):
            raise ValueError(f"{path}: {what} changed since this run was named (sha256 {digest[:12]}…, "
                             f"expected {str(recorded)[:12]}…)")
        object.__setattr__(self, field, path)
        object.__setattr__(self, digest_field, digest)

    def train_config(self, loss: Any = None, **changes: Any) -> TrainConfig:
        """The ``gradlab.real.TrainConfig`` that trains this run.

        Args:
          loss: the resolved loss (default ``resolve_loss(self.loss)``).
          **changes: shared fields to change or trainer options (e.g. ``monitor=True``).
        """
        from gradlab.design import resolve_loss

        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(RunConfig)}
        if self.pooling is not None:
            shared["encoder_options"] = {"pooling": self.pooling}
        name = self.loss.get("loss", "")
        if loss is None and name.startswith(TRANSFORM_PREFIX):  # Rho et al. 2023: InfoNCE, gradient rescaled
            return TrainConfig(**{**shared, **changes}, loss="infonce", transform=name[len(TRANSFORM_PREFIX):],
                               loss_params=dict(self.loss["params"]))
        return TrainConfig(**{**shared, **changes}, loss=resolve_loss(self.loss) if loss is None else loss)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able configuration (what ``config.json`` holds, without the id)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown run configuration key(s) {', '.join(unknown)}")
        return cls(**dict(d))

    def canonical_json(self) -> str:
        """Sorted keys, no spaces, with the schema and gradlab versions: the text the id hashes.

        A user loss file enters by its function name and content hash, not by its path.
        """
        from gradlab._version import __version__

        d = self.to_dict()
        d["loss"] = _loss_identity(d["loss"])
        for name, before in _OPTIONAL.items():
            if d[name] == before:
                del d[name]
        for field, digest, name in (("encoder", "encoder_sha256", "checkpoint"), ("corpus", "corpus_sha256", "file"),
                                    ("senteval", "senteval_sha256", "senteval")):
            if digest in d:
                d[field] = name  # named by its content, not where it lies
        return json.dumps({"schema": SCHEMA_VERSION, "gradlab": __version__, **d}, sort_keys=True,
                          separators=(",", ":"))

    @property
    def id(self) -> str:
        """16 hex digits of the SHA-256 of :meth:`canonical_json`."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        return f"{loss_label(self.loss)} seed={self.seed}"

    def replace(self, **changes) -> RunSpec:
        return dataclasses.replace(self, **changes)
