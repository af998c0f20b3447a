"""The loss zoo: differentiable JAX losses with their exact GD / W / R.

Two doors to the same losses:

* the registry, the catalogue: ``get_loss("infonce", tau=0.05)`` returns a configured
  ``Loss`` (a JAX pytree) with ``components``, ``anchor_gradient``, the angle form, ...;
  ``get_spec(name)`` is the loss's entry (``LossSpec``: defaults, title, label, family,
  factored simulation path, GD / W / R in words, reference);
* one optax-style function per registered loss, defined in ``_functional``:
  ``infonce(h, h_prime, *, tau=0.05, symmetric=False) -> Array`` (``dcl+`` is ``dcl_plus``).

Any loss a user names (text, dict or ``Loss``) is resolved by ``gradlab.resolve_loss``.

Layout (imports flow one way): ``_ops`` (shared numerics) and ``_registry`` (``LossSpec``,
the catalogue) are leaves; ``_loss`` (``Loss``) reads the registry; the family modules
(``_effective``, ``_ineffective``, ``_modified``, ``_margins``) use ``_ops`` and call
``register``; this package imports the families, so importing any part of
``gradlab.losses`` registers every loss. ``_compose`` (the GD / W / R blocks of Eq. 5) is
imported by ``_modified`` (the baseline is a composition); ``_user`` builds the losses a
user designs (``loss_from_cosines``, ``compose``) on top of ``_loss``; ``_transforms``
holds Rho et al. 2023's gradient transforms.
"""

from gradlab.losses import _effective, _ineffective, _margins, _modified  # noqa: F401  (registration)
from gradlab.losses._compose import GD_BLOCKS, RATIO_BLOCKS, WEIGHT_BLOCKS
from gradlab.losses._functional import (  # one function per registered loss, in registry order
    align_mhe,
    align_mhs,
    align_uniform,
    alignment,
    arccon,
    barlow_twins,
    barlow_twins_pearson,
    baseline,
    dcl,
    dcl_plus,
    infonce,
    margin_infonce,
    mat,
    mb,
    met,
    mmhe,
    mmhs,
    mpt,
    mv,
    uniformity,
    vicreg,
    vicreg_nc,
)
from gradlab.losses._loss import Loss, get_loss
from gradlab.losses._ops import (
    TRIPLET_METRICS,
    angular_factor,
    gaussian_logits,
    log_mean_gaussian,
    offdiag_kernel,
    threshold_angle,
    triplet_gate,
)
from gradlab.losses._registry import (
    FACTORED_PATHS,
    FAMILIES,
    KINDS,
    LossSpec,
    get_spec,
    list_losses,
    loss_table,
    register,
)
from gradlab.losses._transforms import (
    TRANSFORMS,
    GradientTransform,
    angle_logits,
    apply_transform,
    margin_angle_gradient,
    margin_logits,
    one_minus_beta_q,
    transform_loss_from_logits,
)
from gradlab.losses._user import (
    NEG_REDUCTIONS,
    autodiff_kernel,
    compose,
    cosine_partials,
    loss_from_cosines,
    probe,
    undefined_mask,
)

__all__ = [
    "GD_BLOCKS",
    "RATIO_BLOCKS",
    "WEIGHT_BLOCKS",
    "infonce",
    "arccon",
    "mpt",
    "met",
    "mat",
    "dcl",
    "dcl_plus",
    "alignment",
    "uniformity",
    "align_uniform",
    "align_mhe",
    "align_mhs",
    "barlow_twins",
    "barlow_twins_pearson",
    "vicreg",
    "vicreg_nc",
    "margin_infonce",
    "mmhe",
    "mmhs",
    "mb",
    "mv",
    "baseline",
    "Loss",
    "get_loss",
    "TRIPLET_METRICS",
    "angular_factor",
    "gaussian_logits",
    "log_mean_gaussian",
    "offdiag_kernel",
    "threshold_angle",
    "triplet_gate",
    "BUILTIN",
    "FACTORED_PATHS",
    "FAMILIES",
    "KINDS",
    "LossSpec",
    "get_spec",
    "list_losses",
    "loss_table",
    "register",
    "TRANSFORMS",
    "GradientTransform",
    "angle_logits",
    "apply_transform",
    "margin_angle_gradient",
    "margin_logits",
    "one_minus_beta_q",
    "transform_loss_from_logits",
    "NEG_REDUCTIONS",
    "autodiff_kernel",
    "compose",
    "cosine_partials",
    "loss_from_cosines",
    "probe",
    "undefined_mask",
]

#: The names of the losses gradlab itself defines, fixed once this package is imported (a user's
#: ``register`` adds to the registry, never to this set).
BUILTIN = frozenset(list_losses())
