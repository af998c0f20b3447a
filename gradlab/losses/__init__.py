"""The loss zoo: differentiable JAX losses with their exact GD / W / R.

Public names, one per line. Each family lives in its own private module, with its
test in ``tests/``; importing a family module registers its losses.
"""

from gradlab.losses._base import FAMILIES as FAMILIES
from gradlab.losses._base import Loss as Loss
from gradlab.losses._base import LossSpec as LossSpec
from gradlab.losses._base import get_loss as get_loss
from gradlab.losses._base import get_spec as get_spec
from gradlab.losses._base import list_losses as list_losses
from gradlab.losses._base import loss_table as loss_table
from gradlab.losses._base import register as register
from gradlab.losses._transforms import TRANSFORMS as TRANSFORMS
from gradlab.losses._transforms import GradientTransform as GradientTransform
from gradlab.losses._transforms import apply_transform as apply_transform
from gradlab.losses._transforms import margin_logits as margin_logits
from gradlab.losses._transforms import transform_loss_from_logits as transform_loss_from_logits
