"""Design a loss: resolve any loss a user names — registered, composed, transformed, or their own function.

One entry point, ``resolve_loss(spec, params=...)`` (also ``gradlab.resolve_loss``), used by the
CLI (``--loss``), training (``TrainConfig.loss``), the experiments (their loss dicts), the
simulator (``gradlab.simulate``) and the monitor (``gradlab.monitor``). A spec is any of:

* a ``gradlab.Loss`` (its parameters replaced by ``params``);
* a registered name: ``"infonce"`` (``gradlab.get_loss``);
* a composition: ``"compose:gd=indicator,weight=softmax,ratio=static"`` (``gradlab.compose``);
* a Rho et al. 2023 gradient transform: ``"transform:emphasize"``
  (``gradlab.losses.apply_transform``; a ``GradientTransform``, not a ``Loss``);
* a user function in a file: ``"path/to/file.py:function"``;
* a user function in an importable module: ``"package.module:function"``;
* an experiment's loss dict: ``{"loss": name, "params": {...}}``,
  ``{"compose": {"gd": ..., "weight": ..., "ratio": ...}, "params": {...}}`` or
  ``{"user": "file.py:function", "sha256": ..., "params": {...}}`` (a given ``sha256``
  must be the file's: a run never executes another loss than the one its id names;
  ``gradlab.experiments.canonical_loss`` writes it).

The function is either a ``gradlab.Loss`` (e.g. built with ``gradlab.loss_from_cosines``
in that file) or a plain ``fn(c_pos, c_neg, *, p1=default, ...)``: its keyword
parameters with defaults become the loss's parameters, and an attribute
``fn.neg_reduction = "logsumexp" | "max"`` declares the factored simulation path.
The loss is probed on a small batch; every failure (missing file or function, wrong
signature, wrong output shape, NaN) is a one-line ``ValueError``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gradlab.losses import (
    GradientTransform,
    Loss,
    apply_transform,
    compose,
    get_loss,
    loss_from_cosines,
    probe,
)

__all__ = ["resolve_loss", "loss_source", "parse_compose", "loss_from_cosines", "compose"]

_SPELLINGS = ("a gradlab Loss, a registered name, compose:gd=...,weight=...,ratio=..., transform:NAME, "
              "FILE.py:FUNCTION, module:FUNCTION or a loss dict")

_MODULES: dict[tuple[str, int], Any] = {}
_FROM_FUNCTIONS: dict[tuple[int, str], Loss] = {}


def parse_compose(text: str) -> dict[str, str]:
    """``"gd=indicator,weight=softmax,ratio=static"`` -> ``{"gd": ..., "weight": ..., "ratio": ...}``.

    Examples:
      >>> parse_compose("gd=sigmoid, weight=hardest, ratio=mat")
      {'gd': 'sigmoid', 'weight': 'hardest', 'ratio': 'mat'}
    """
    out: dict[str, str] = {}
    for item in str(text).split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key not in ("gd", "weight", "ratio") or not value:
            raise ValueError(f"compose expects gd=...,weight=...,ratio=...; got {item.strip()!r} in {text!r}")
        if key in out:
            raise ValueError(f"compose names {key!r} twice in {text!r}")
        out[key] = value
    missing = [k for k in ("gd", "weight", "ratio") if k not in out]
    if missing:
        raise ValueError(f"compose needs {', '.join(missing)} too; got {text!r}")
    return out


def loss_source(text: str) -> tuple[str, str | None]:
    """``FILE.py:FUNCTION`` with an absolute path and the file's SHA-256; ``module:FUNCTION`` as is (no hash).

    Raises:
      ValueError: the file is missing or unreadable.
    """
    source, _, attr = text.rpartition(":")
    if not source.endswith(".py"):
        return text, None
    path = Path(source).expanduser().resolve()
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ValueError(f"loss file not found or unreadable: {source!r} ({exc.strerror})") from None
    return f"{path}:{attr}", digest


def _import_file(path: Path):
    if not path.is_file():
        raise ValueError(f"loss file not found: {path}")
    key = (str(path.resolve()), path.stat().st_mtime_ns)
    if key not in _MODULES:
        name = "gradlab_user_" + hashlib.sha1(key[0].encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - user code: any failure becomes one line
            sys.modules.pop(name, None)
            raise ValueError(f"could not load {path}: {type(exc).__name__}: {_first_line(exc)}") from None
        _MODULES[key] = module
    return _MODULES[key]


def _import_module(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001
        raise ValueError(f"could not import module {name!r}: {type(exc).__name__}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def _fn_params(fn, where: str) -> tuple[dict[str, float], list[str]]:
    """(defaults of fn's parameters after c_pos, c_neg; names without default)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: cannot read the signature of {fn!r}") from None
    ps = list(sig.parameters.values())
    positional = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in ps):
        raise ValueError(f"{where}: the function must take (c_pos, c_neg, **params); its signature is {sig}")
    defaults, required = {}, []
    for p in positional[2:] + [p for p in ps if p.kind is p.KEYWORD_ONLY]:
        if p.default is p.empty:
            required.append(p.name)
        else:
            defaults[p.name] = p.default
    return defaults, required


def _from_function(fn, name: str, where: str, params: Mapping[str, float]) -> Loss:
    defaults, required = _fn_params(fn, where)
    missing = [k for k in required if k not in params]
    if missing:
        raise ValueError(f"{where}: parameter(s) {', '.join(missing)} have no default: give them with --param KEY=VALUE")
    unknown = set(params) - set(defaults) - set(required)
    if unknown:
        raise ValueError(f"{where}: unknown parameter(s) {', '.join(sorted(unknown))}; valid: {', '.join([*defaults, *required]) or '(none)'}")
    key = (id(fn), name)
    if key not in _FROM_FUNCTIONS:  # one spec per function: one compilation per shape
        merged = {**defaults, **{k: params[k] for k in required}}
        _FROM_FUNCTIONS[key] = loss_from_cosines(fn, name=name, params=merged, check=False,
                                                 neg_reduction=getattr(fn, "neg_reduction", None))
    return _FROM_FUNCTIONS[key].replace(**params)


def _from_text(text: str, params: dict[str, float], symmetric: bool) -> Loss | GradientTransform:
    text = text.strip()
    if text.startswith("compose:"):
        return compose(**parse_compose(text[len("compose:"):]), symmetric=symmetric, **params)
    if text.startswith("transform:"):
        return apply_transform(text[len("transform:"):].strip(), symmetric=symmetric, **params)
    if ":" not in text:
        return get_loss(text, symmetric=symmetric, **params)
    source, _, attr = text.rpartition(":")
    if not attr.isidentifier():
        raise ValueError(f"{text!r}: expected FILE.py:FUNCTION or module:FUNCTION; {attr!r} is not a function name")
    module = _import_file(Path(source)) if source.endswith(".py") else _import_module(source)
    if not hasattr(module, attr):
        names = sorted(n for n, v in vars(module).items() if not n.startswith("_") and (callable(v) or isinstance(v, Loss)))
        raise ValueError(f"{source} has no function {attr!r}; it defines: {', '.join(names) or '(nothing callable)'}")
    obj = getattr(module, attr)
    if isinstance(obj, Loss):
        loss = obj.replace(**params)
    elif callable(obj):
        loss = _from_function(obj, attr, text, params)
    else:
        raise ValueError(f"{text}: {attr!r} is a {type(obj).__name__}, not a function or a gradlab Loss")
    if loss.spec.kind == "cosine":
        probe(loss)
    return Loss.from_spec(loss.spec, symmetric=symmetric, **loss.params)


def _from_dict(spec: Mapping[str, Any], params: dict[str, float], symmetric: bool) -> Loss | GradientTransform:
    keys = set(spec)
    heads = keys & {"loss", "compose", "user"}
    if len(heads) != 1 or keys - {"loss", "compose", "user", "params", "sha256"} or ("sha256" in keys and "user" not in keys):
        raise ValueError(f"a loss dict has one of 'loss', 'compose', 'user' and optional 'params' "
                         f"('sha256' with 'user'); got keys {sorted(keys)}")
    given = spec.get("params") or {}
    if not isinstance(given, Mapping):
        raise TypeError(f"a loss dict's 'params' must be a dict of numbers; got {type(given).__name__}")
    params = {**given, **params}
    if "compose" in spec:
        parts = spec["compose"]
        if not isinstance(parts, Mapping):
            raise TypeError(f"'compose' must be a dict such as {{'gd': ..., 'weight': ..., 'ratio': ...}}; got {parts!r}")
        return compose(**parts, symmetric=symmetric, **params)
    text = spec["loss"] if "loss" in spec else spec["user"]
    if not isinstance(text, str) or not text.strip():
        raise TypeError(f"a loss dict's {next(iter(heads))!r} must be a non-empty string; got {text!r}")
    if spec.get("sha256") is not None:
        text, digest = loss_source(text)
        if digest != spec["sha256"]:
            raise ValueError(f"{text}: the file changed since this run was named (sha256 {str(digest)[:12]}…, "
                             f"expected {str(spec['sha256'])[:12]}…)")
    return _from_text(text, params, symmetric)


def resolve_loss(spec: Loss | str | Mapping[str, Any], *, params: Mapping[str, float] | None = None,
                 symmetric: bool | None = None) -> Loss | GradientTransform:
    """The configured loss a spec names: the one door from a name, text or dict to a ``Loss``.

    Args:
      spec: a ``Loss``, a registered name, ``"compose:gd=...,weight=...,ratio=..."``,
        ``"transform:NAME"``, ``"FILE.py:FUNCTION"``, ``"module:FUNCTION"`` or a loss dict
        (see the module doc).
      params: parameter overrides (``--param``); they win over a loss dict's ``params``.
      symmetric: average both directions in ``loss(h, h_prime)``; None keeps a given
        ``Loss``'s own setting (False for everything else).

    Returns:
      A ``Loss``; a ``GradientTransform`` (``gradlab.losses.apply_transform``) for ``transform:NAME``.

    Raises:
      ValueError: one line naming what is wrong (unknown name, missing file or function,
        wrong signature, output shape, non-finite output on the probe batch).
      TypeError: a spec of another type.

    Examples:
      >>> resolve_loss("compose:gd=indicator,weight=softmax,ratio=static", params={"m": 0.2})
      Loss('baseline', m=0.2, tau=0.05, r=1)
      >>> resolve_loss({"loss": "infonce", "params": {"tau": 0.1}})
      Loss('infonce', tau=0.1)
      >>> resolve_loss("transform:emphasize", params={"s": 2.0}).name
      'emphasize'
    """
    params = dict(params or {})
    if isinstance(spec, Loss):
        keep = spec.symmetric if symmetric is None else symmetric
        return Loss.from_spec(spec.spec, symmetric=keep, **{**spec.params, **params})
    symmetric = bool(symmetric)
    if isinstance(spec, Mapping):
        return _from_dict(spec, params, symmetric)
    if not isinstance(spec, str):
        raise TypeError(f"a loss is {_SPELLINGS}; got {type(spec).__name__}")
    if not spec.strip():
        raise ValueError(f"a loss is {_SPELLINGS}; got {spec!r}")
    return _from_text(spec, params, symmetric)
