"""Shared result-building helpers of the statistics and the quadrature (no statistic lives here)."""

from __future__ import annotations

import numpy as np

from gradlab.design import resolve_loss
from gradlab.io import Result, runtime_meta
from gradlab.losses import Loss
from gradlab.simulate._protocol import Protocol


def as_loss(loss) -> Loss:
    """Any spec ``gradlab.resolve_loss`` reads (a name, ``compose:...``, a ``Loss``, ...) -> the ``Loss``."""
    out = resolve_loss(loss)
    if not isinstance(out, Loss):
        raise TypeError(f"a simulated loss must be a gradlab Loss; {loss!r} is a {type(out).__name__}")
    return out


def check_protocol(protocol) -> Protocol:
    """``None`` -> the paper's ``Protocol()``; anything but a ``Protocol`` is a TypeError."""
    if protocol is None:
        return Protocol()
    if not isinstance(protocol, Protocol):
        raise TypeError(f"protocol must be a gradlab.simulate.Protocol; got {type(protocol).__name__}")
    return protocol


def meta(statistic: str, protocol: Protocol, loss: Loss | None, **extra) -> dict:
    """The metadata of a simulated Result: statistic, loss, protocol, seed, mode, runtime."""
    out = {"statistic": statistic}
    if loss is not None:
        out.update(loss=loss.name, params=dict(loss.params), symmetric=loss.symmetric)
    out.update(protocol=protocol.to_dict(), seed=protocol.seed, mode=protocol.mode)
    out.update(extra)
    out.update(runtime_meta())
    return out


def grid_result(protocol: Protocol, mean, *, coords=None, **fields) -> Result:
    """A Result on the protocol's (μ_pos, μ_neg) grid; ``coords`` adds axes of extra arrays."""
    axes = {"mu_pos": protocol.mu_pos, "mu_neg": protocol.mu_neg, **(coords or {})}
    return Result(dims=("mu_pos", "mu_neg"), coords=axes, mean=mean, **fields)


def stderr_out(se, count):
    """The standard error where at least two batches count, NaN elsewhere."""
    return np.where(count > 1, se, np.nan)
