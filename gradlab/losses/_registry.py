"""What a loss is (``LossSpec``) and the catalogue of registered ones: a leaf module.

A spec is one of three explicit kinds (``LossSpec.kind``):

* ``"cosine"`` — a per-anchor loss that sees the anchor only through its cosines
  c_p = h_i·h_i' (...,) and c_j = h_i·n_j (..., M): ``value(c_pos, c_neg, valid, **p)``
  gives L_i and ``kernel(c_pos, c_neg, valid, **p) -> (gd, weight, ratio)`` its
  GD / W / R. The embedding form (the N − 1 off-diagonal negatives of each row, gathered),
  the angle form (M = N − 1) and the per-anchor values all derive from these two functions;
  gradlab itself always passes an all-true ``valid``.
* ``"per_anchor"`` — a per-anchor loss written on unit rows: ``per_anchor(h, hp, **p)``
  gives the (N,) values L_i and ``components(h, hp, **p)`` describes ∂L_i/∂h_i, every
  other embedding held fixed. ``objective`` (optional) is the training objective when
  its gradient differs from that of mean_i L_i (the gated modified losses).
* ``"batch"`` — a batch-level objective on unit rows: ``batch(h, hp, **p)`` gives the
  scalar L and ``components(h, hp, **p)`` describes ∂L/∂h_i.

Only the cosine kind has an angle form. This module imports no family: the package
``gradlab.losses`` imports the family modules, which call ``register``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType

__all__ = ["KINDS", "FAMILIES", "FACTORED_PATHS", "LossSpec", "register", "get_spec", "list_losses", "loss_table"]

KINDS = ("cosine", "per_anchor", "batch")
FAMILIES = ("effective", "ineffective", "modified", "margin")
RULES = ("positive", "nonnegative", "unit", "real")
#: The factored simulation paths (``gradlab.simulate``): the loss sees its negatives only
#: through τ·logsumexp(c_j/τ) (``"lse"``) or max_j c_j (``"max"``).
FACTORED_PATHS = ("lse", "max")

_FUNCTIONS = {
    "cosine": ("value", "kernel"),
    "per_anchor": ("per_anchor", "components"),
    "batch": ("batch", "components"),
}
_OPTIONAL = {"cosine": (), "per_anchor": ("objective",), "batch": ()}
_ALL_FUNCTIONS = ("value", "kernel", "per_anchor", "batch", "components", "objective")

_REGISTRY: dict[str, LossSpec] = {}


@dataclasses.dataclass(frozen=True, eq=False)
class LossSpec:
    """Everything gradlab knows about one loss. Compared and hashed by identity.

    Build one with ``LossSpec.from_cosines`` (kind ``"cosine"``) or
    ``LossSpec.on_embeddings`` (kinds ``"per_anchor"`` / ``"batch"``); the constructor
    checks that exactly the functions of the kind are given.

    Attributes:
      name: registry key (lower case), e.g. ``"infonce"``.
      title: display name, e.g. ``"InfoNCE"`` (``gradlab losses``, the docs).
      label: short name in figures and tables, e.g. ``"mB"`` (default: ``title``).
      family: one of ``FAMILIES`` for registered losses; free text otherwise.
      kind: one of ``KINDS`` (see the module doc).
      defaults: parameter name -> default value (from the papers).
      rules: parameter name -> ``"positive" | "nonnegative" | "unit" | "real"``.
      negatives: ``"h_prime"`` or ``"h"``: which negatives the paradigm form uses.
      value, kernel: the cosine kind's functions.
      per_anchor, batch, components, objective: the embedding kinds' functions.
      exact: False where the published decomposition is approximate (VICReg, Li et al. 2024).
      factored: ``"lse"`` or ``"max"`` when the loss reads its negatives through one
        reduction (one of ``FACTORED_PATHS``): the simulator's exact fast path; None otherwise.
      gd, weight, ratio: the components in words (for tables and ``gradlab losses``).
      reference: where the formula comes from.
    """

    name: str
    title: str
    family: str
    kind: str
    defaults: Mapping[str, float]
    rules: Mapping[str, str]
    negatives: str = "h_prime"
    value: Callable | None = None
    kernel: Callable | None = None
    per_anchor: Callable | None = None
    batch: Callable | None = None
    components: Callable | None = None
    objective: Callable | None = None
    exact: bool = True
    factored: str | None = None
    label: str = ""
    gd: str = ""
    weight: str = ""
    ratio: str = ""
    reference: str = ""

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}; choose from {KINDS}")
        if self.negatives not in ("h", "h_prime"):
            raise ValueError(f"{self.name}: negatives must be 'h' or 'h_prime'; got {self.negatives!r}")
        if set(self.defaults) != set(self.rules):
            raise ValueError(f"{self.name}: defaults and rules must name the same parameters")
        if self.factored is not None and (self.kind != "cosine" or self.factored not in FACTORED_PATHS):
            raise ValueError(f"{self.name}: factored must be None or, for a cosine loss, one of {FACTORED_PATHS}; "
                             f"got {self.factored!r}")
        if not self.label:
            object.__setattr__(self, "label", self.title)
        bad_rules = {k: r for k, r in self.rules.items() if r not in RULES}
        if bad_rules:
            raise ValueError(f"{self.name}: unknown parameter rule(s) {bad_rules}; choose from {RULES}")
        needed, optional = _FUNCTIONS[self.kind], _OPTIONAL[self.kind]
        missing = [f for f in needed if getattr(self, f) is None]
        extra = [f for f in _ALL_FUNCTIONS if f not in needed + optional and getattr(self, f) is not None]
        if missing or extra:
            raise ValueError(
                f"{self.name}: a {self.kind!r} spec takes exactly {' and '.join(needed)}"
                f"{' (and optionally ' + ', '.join(optional) + ')' if optional else ''}; "
                f"missing {missing or 'none'}, not allowed {extra or 'none'}"
            )
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))
        object.__setattr__(self, "rules", MappingProxyType(dict(self.rules)))

    @classmethod
    def from_cosines(cls, name: str, value: Callable, kernel: Callable, *, defaults: Mapping[str, float],
                     rules: Mapping[str, str], title: str | None = None, family: str = "custom",
                     **meta) -> LossSpec:
        """A ``"cosine"`` spec from ``value`` and ``kernel`` (not registered).

        Examples:
          >>> import jax.numpy as jnp
          >>> spec = LossSpec.from_cosines(
          ...     "neg_cos", lambda c_pos, c_neg, valid, *, s: -s * c_pos,
          ...     lambda c_pos, c_neg, valid, *, s: (jnp.ones_like(c_pos), 0.0 * c_neg, s + 0.0 * c_pos[..., None]),
          ...     defaults={"s": 1.0}, rules={"s": "positive"})
          >>> spec.kind
          'cosine'
        """
        return cls(name=name, title=title or name, family=family, kind="cosine", defaults=defaults,
                   rules=rules, value=value, kernel=kernel, **meta)

    @classmethod
    def on_embeddings(cls, name: str, components: Callable, *, per_anchor: Callable | None = None,
                      batch: Callable | None = None, defaults: Mapping[str, float],
                      rules: Mapping[str, str], title: str | None = None, family: str = "custom",
                      **meta) -> LossSpec:
        """A ``"per_anchor"`` or ``"batch"`` spec (give exactly one of ``per_anchor``, ``batch``)."""
        if (per_anchor is None) == (batch is None):
            raise ValueError(f"{name}: give exactly one of per_anchor= and batch=")
        kind = "batch" if batch is not None else "per_anchor"
        return cls(name=name, title=title or name, family=family, kind=kind, defaults=defaults, rules=rules,
                   per_anchor=per_anchor, batch=batch, components=components, **meta)


def register(spec: LossSpec) -> LossSpec:
    """Add a spec to the registry (its name must be new, its family one of ``FAMILIES``)."""
    if spec.family not in FAMILIES:
        raise ValueError(f"unknown family {spec.family!r}; choose from {FAMILIES}")
    if spec.name in _REGISTRY:
        raise ValueError(f"a loss named {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def list_losses(family: str | None = None) -> list[str]:
    """Names of all registered losses (optionally of one family), in registry order.

    Examples:
      >>> from gradlab.losses import list_losses
      >>> list_losses("margin")
      ['margin_infonce']
    """
    if family is not None and family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; choose from {FAMILIES}")
    return [n for n, s in _REGISTRY.items() if family is None or s.family == family]


def get_spec(name: str) -> LossSpec:
    """The registered spec of a loss by name (case-insensitive); unknown names raise ``ValueError``."""
    key = str(name).lower()
    if key not in _REGISTRY:
        raise ValueError(f"unknown loss {name!r}; valid choices: {', '.join(_REGISTRY)}")
    return _REGISTRY[key]


def loss_table() -> list[dict[str, str]]:
    """One row per loss: name, family, parameters with defaults, GD / W / R in words."""
    return [
        dict(
            name=s.name,
            title=s.title,
            family=s.family,
            params=", ".join(f"{k}={v:g}" for k, v in s.defaults.items()),
            negatives=s.negatives,
            gd=s.gd,
            weight=s.weight,
            ratio=s.ratio,
            exact="yes" if s.exact else "approximate (residual reported)",
            reference=s.reference,
        )
        for s in _REGISTRY.values()
    ]
