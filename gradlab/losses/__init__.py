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
