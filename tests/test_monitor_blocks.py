"""Row blocks of anchors (the monitor's default for N > block) give one block's numbers.

Every loss kernel sees, per anchor, the N − 1 negatives other than its own positive, whatever
rows the block holds: ``losses._ops.offdiag_kernel`` locates the positive's column from the
``valid`` mask, not from the block's shape.
"""

from __future__ import annotations

import numpy as np

from gradlab.losses import compose, get_loss, offdiag_kernel
from gradlab.monitor import analyze


def _views(n=150, d=12, seed=0):
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, d))
    return h, h + 0.6 * rng.normal(size=h.shape)


def _flat(tree, prefix=""):
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}/"))
        else:
            out[prefix + k] = np.asarray(v, dtype=float)
    return out


def test_kernel_on_a_row_block_equals_the_rows_of_the_full_kernel():
    h, hp = _views()
    hn = h / np.linalg.norm(h, axis=1, keepdims=True)
    hpn = hp / np.linalg.norm(hp, axis=1, keepdims=True)
    c = hn @ hpn.T
    rows = np.arange(40, 90)
    valid = np.arange(c.shape[1])[None, :] != rows[:, None]
    for loss in (get_loss("infonce", tau=0.1), get_loss("met"), compose(gd="fraction", weight="hardest", ratio="mat", tau=0.1)):
        kern = offdiag_kernel(loss.spec.kernel)
        full = kern(np.diag(c), c, **dict(loss.params))
        block = kern(np.diag(c)[rows], c[rows], valid, **dict(loss.params))
        for f, b in zip(full, block, strict=True):
            f = np.asarray(f)
            np.testing.assert_array_equal(f[rows] if f.shape[0] == c.shape[0] else f, np.asarray(b))
        # the positive's column carries no weight
        assert np.all(np.asarray(block[1])[np.arange(len(rows)), rows] == 0)


def test_monitor_row_blocks_equal_one_block():
    h, hp = _views()
    kw = dict(batch_size=150, losses=["infonce", "arccon", "met"], taus=(0.05, 0.3), lambdas=(0.5,),
              rankme_window=None)
    one, blocks = analyze(h, hp, block=512, **kw), analyze(h, hp, block=32, **kw)
    assert one.pop("losses") == blocks.pop("losses")  # which loss stands behind each key: the same
    one, blocks = _flat(one), _flat(blocks)
    assert one.keys() == blocks.keys()
    for key in one:  # float32: the two paths may fuse an expression differently (an ulp or two)
        np.testing.assert_allclose(blocks[key], one[key], rtol=1e-6, atol=1e-7, err_msg=key)
