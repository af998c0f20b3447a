"""Loop-based NumPy references for the effective losses, written from the papers.

Independent of gradlab's JAX code: plain Python loops over anchors and negatives,
math-module functions, float64. Values from Li et al. 2024 Sec. 2.2 / Nie et al. 2023 Eqs. 1, 5, 10;
components from Li et al. 2024 Table 1 (MET with the nearest negative, docs/formulas.md typo note)
and Nie et al. 2023 for MAT / DCL / DCL+.
"""

from __future__ import annotations

import math

import numpy as np


def unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _dot(a, b):
    return float(sum(x * y for x, y in zip(a, b, strict=True)))


def _cosines(h, hp, i):
    n = len(h)
    c_p = _dot(h[i], hp[i])
    c = [_dot(h[i], hp[j]) for j in range(n)]
    return c_p, c, [j for j in range(n) if j != i]


def _acos(c):
    return math.acos(max(-1.0, min(1.0, c)))


def value(name, h, hp, **p):
    """Per-anchor losses L_i, (N,)."""
    h, hp = unit(h), unit(hp)
    out = []
    for i in range(len(h)):
        c_p, c, negs = _cosines(h, hp, i)
        if name == "infonce":
            tau = p["tau"]
            den = sum(math.exp(c[j] / tau) for j in range(len(h)))
            out.append(-math.log(math.exp(c_p / tau) / den))
        elif name == "arccon":
            tau, u = p["tau"], p["u"]
            pos = math.exp(math.cos(_acos(c_p) + u) / tau)
            out.append(-math.log(pos / (pos + sum(math.exp(c[j] / tau) for j in negs))))
        elif name == "mpt":
            out.append(max(0.0, -c_p + max(c[j] for j in negs) + p["m"]))
        elif name == "met":
            d = lambda a, b: float(np.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True))))  # noqa: E731
            out.append(max(0.0, d(h[i], hp[i]) - min(d(h[i], hp[j]) for j in negs) + p["m"]))
        elif name == "mat":
            out.append(max(0.0, _acos(c_p) - min(_acos(c[j]) for j in negs) + p["m"]))
        elif name in ("dcl", "dcl+"):
            tau = p["tau"]
            v = -c_p / tau + math.log(sum(math.exp(c[j] / tau) for j in negs))
            out.append(max(v, 0.0) if name == "dcl+" else v)
        else:
            raise KeyError(name)
    return np.array(out)


def components(name, h, hp, **p):
    """(gd (N,), weight (N, N) zero diagonal, ratio (N, N)) from Table 1's closed forms."""
    h, hp = unit(h), unit(hp)
    n = len(h)
    gd = np.zeros(n)
    w = np.zeros((n, n))
    r = np.zeros((n, n))
    for i in range(n):
        c_p, c, negs = _cosines(h, hp, i)
        hard = max(negs, key=lambda j: c[j])
        if name in ("infonce", "arccon", "dcl", "dcl+"):
            tau = p["tau"]
            s = sum(math.exp(c[j] / tau) for j in negs)
            for j in negs:
                w[i, j] = math.exp(c[j] / tau) / (tau * s)
                r[i, j] = 1.0
            if name == "infonce":
                gd[i] = 1.0 / (1.0 + math.exp(c_p / tau) / s)
            elif name == "arccon":
                th, u = _acos(c_p), p["u"]
                gd[i] = 1.0 / (1.0 + math.exp(math.cos(th + u) / tau) / s)
                for j in negs:
                    r[i, j] = math.sin(th + u) / math.sin(th)
            elif name == "dcl":
                gd[i] = 1.0
            else:
                gd[i] = 1.0 if (-c_p / tau + math.log(s)) > 0 else 0.0
        elif name == "mpt":
            gd[i] = 1.0 if c_p - c[hard] < p["m"] else 0.0
            w[i, hard] = 1.0
            for j in negs:
                r[i, j] = 1.0
        elif name == "met":
            dist = lambda cc: math.sqrt(2 - 2 * cc)  # noqa: E731
            gd[i] = 1.0 if dist(c[hard]) - dist(c_p) < p["m"] else 0.0
            w[i, hard] = 1.0 / dist(c[hard])
            for j in negs:
                r[i, j] = math.sqrt((1 - c[j]) / (1 - c_p))
        elif name == "mat":
            gd[i] = 1.0 if _acos(c[hard]) - _acos(c_p) < p["m"] else 0.0
            w[i, hard] = 1.0 / math.sin(_acos(c[hard]))
            for j in negs:
                r[i, j] = math.sin(_acos(c[j])) / math.sin(_acos(c_p))
        else:
            raise KeyError(name)
    return gd, w, r
