"""A vectorizable float32 cosine for the simulation kernels.

XLA's CPU ``cos`` is correctly rounded but is evaluated one element at a time: on the
2-core benchmark machine it cost 0.25 ms of a 0.6 ms independent-mode cell (128k
angles). ``cos_f32`` reduces θ by π/2 with a Cody–Waite split of π/2 into float32
parts (the product ``j · C_k`` with every part but the last is exact for |j| < 2^12) and
evaluates the Taylor series of cos and sin on [−π/4, π/4] (truncation error below 2e-9,
a thirtieth of an ulp), all in
element-wise multiply-adds that XLA vectorizes. Over |θ| ≤ ``COS_F32_LIMIT`` it stays
within 2.5 ulp and 1e-7 of the exact cosine (2.32 ulp at worst over every float32 in
[1/8, 4096)), also next to the zeros of cos, where a
short split of π/2 would lose every digit (tests/test_simulate_kernels.py measures this
against float64; XLA's own is within 0.56 ulp).

``cos_for(dtype, bound)`` picks it only where that holds: float32 angles bounded by the
limit. float64 (the verification dtype) always uses ``jnp.cos``.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np

COS_F32_LIMIT = 4096.0  # |θ| bound: j = round(2θ/π) ≤ 2608 < 2^12 keeps j · C_k exact
_ZERO_BITS = 12
_PI_OVER_2 = "1.57079632679489661923132169163975144209858469968755291048747229615390820314"


def _cody_waite_split(digits: str, parts: int) -> tuple[np.float32, ...]:
    """float32 parts summing to the decimal number ``digits``; all but the last end in
    ``_ZERO_BITS`` zero bits, so their products with an integer below 2^12 are exact."""
    decimal.getcontext().prec = 80
    rest = decimal.Decimal(digits)
    mask = np.uint32((0xFFFFFFFF << _ZERO_BITS) & 0xFFFFFFFF)
    out = []
    for k in range(parts):
        f = np.float32(float(rest))
        if k < parts - 1:
            f = (np.array(f).view(np.uint32) & mask).view(np.float32)[()]
        out.append(np.float32(f))
        rest -= decimal.Decimal(float(f))  # exact: a float32 is a short binary fraction
    return tuple(out)


_C = _cody_waite_split(_PI_OVER_2, 5)
_TWO_OVER_PI = np.float32(2 / np.pi)
# Taylor coefficients, highest order first: cos (−1)^k/(2k)!, k = 5..1; sin (−1)^k/(2k+1)!, k = 4..1
_COS = tuple(np.float32((-1) ** k / math.factorial(2 * k)) for k in range(5, 0, -1))
_SIN = tuple(np.float32((-1) ** k / math.factorial(2 * k + 1)) for k in range(4, 0, -1))


def _horner(x, coeffs):
    acc = coeffs[0]
    for c in coeffs[1:]:
        acc = acc * x + c
    return acc


def cos_f32(theta):
    """cos θ for float32 θ with |θ| ≤ ``COS_F32_LIMIT`` (≤ 2.5 ulp; beyond, inaccurate)."""
    theta = jnp.asarray(theta, jnp.float32)
    j = jnp.round(theta * _TWO_OVER_PI)
    r = theta
    for c in _C:
        r = r - j * c
    r2 = r * r
    cos_r = 1 + r2 * _horner(r2, _COS)
    sin_r = r + r * r2 * _horner(r2, _SIN)
    q = j.astype(jnp.int32) & 3  # θ = r + q·π/2 (mod 2π)
    value = jnp.where((q & 1) == 1, sin_r, cos_r)
    return jnp.where((q == 1) | (q == 2), -value, value)


def cos_for(dtype, bound: float) -> Callable:
    """The cosine to use on angles of ``dtype`` with |θ| ≤ ``bound``: ``cos_f32`` where it is
    accurate (float32, bound within the limit), else ``jnp.cos``."""
    if jnp.dtype(dtype) == jnp.float32 and math.isfinite(bound) and bound <= COS_F32_LIMIT:
        return cos_f32
    return jnp.cos
