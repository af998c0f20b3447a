"""The loss zoo: differentiable JAX losses with their exact GD / W / R.

Two doors to the same losses:

* the registry, the catalogue: ``get_loss("infonce", tau=0.05)`` returns a configured
  ``Loss`` (a JAX pytree) with ``components``, ``anchor_gradient``, the angle form, ...;
* one optax-style function per registered loss, generated from the registry:
  ``infonce(h, h_prime, *, tau=0.05, symmetric=False) -> Array`` (``dcl+`` is ``dcl_plus``).

Layout (imports flow one way): ``_ops`` (shared numerics) and ``_registry`` (``LossSpec``,
the catalogue) are leaves; ``_loss`` (``Loss``) reads the registry; the family modules
(``_effective``, ``_ineffective``, ``_modified``, ``_margins``) use ``_ops`` and call
``register``; this package imports the families, so importing any part of
``gradlab.losses`` registers every loss. ``_compose`` (the GD / W / R blocks of Eq. 5) is
imported by ``_modified`` (the baseline is a composition); ``_user`` builds the losses a
user designs (``loss_from_cosines``, ``compose``) on top of ``_loss``.
"""

from gradlab.losses import _effective, _ineffective, _margins, _modified  # noqa: F401  (registration)
from gradlab.losses._functional import functional_api as _functional_api
from gradlab.losses._loss import Loss as Loss
from gradlab.losses._loss import get_loss as get_loss
from gradlab.losses._ops import log_mean_gaussian as log_mean_gaussian
from gradlab.losses._ops import offdiag_kernel as offdiag_kernel
from gradlab.losses._registry import FAMILIES as FAMILIES
from gradlab.losses._registry import KINDS as KINDS
from gradlab.losses._registry import LossSpec as LossSpec
from gradlab.losses._registry import get_spec as get_spec
from gradlab.losses._registry import list_losses as list_losses
from gradlab.losses._registry import loss_table as loss_table
from gradlab.losses._registry import register as register
from gradlab.losses._transforms import TRANSFORMS as TRANSFORMS
from gradlab.losses._transforms import GradientTransform as GradientTransform
from gradlab.losses._transforms import apply_transform as apply_transform
from gradlab.losses._transforms import margin_logits as margin_logits
from gradlab.losses._transforms import transform_loss_from_logits as transform_loss_from_logits
from gradlab.losses._user import autodiff_kernel as autodiff_kernel
from gradlab.losses._user import compose as compose
from gradlab.losses._user import loss_from_cosines as loss_from_cosines
from gradlab.losses._user import undefined_mask as undefined_mask

_FUNCTIONS = _functional_api()
globals().update(_FUNCTIONS)

__all__ = [
    "FAMILIES",
    "GradientTransform",
    "TRANSFORMS",
    "apply_transform",
    "autodiff_kernel",
    "compose",
    "loss_from_cosines",
    "offdiag_kernel",
    "undefined_mask",
    "margin_logits",
    "transform_loss_from_logits",
    "KINDS",
    "Loss",
    "LossSpec",
    "get_loss",
    "get_spec",
    "list_losses",
    "log_mean_gaussian",
    "loss_table",
    "register",
    *_FUNCTIONS,
]
