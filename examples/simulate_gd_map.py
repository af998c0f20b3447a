"""Simulate Li et al. 2024's gradient-dissipation map for a loss, compare with quadrature, save, reload.

Run: python examples/simulate_gd_map.py  (about ten seconds on a laptop CPU)
"""

import numpy as np
from scipy import stats

import gradlab
from gradlab import simulate
from gradlab.io import Result

# The paper's protocol (Li et al. 2024 App. A.1): 100 x 100 (mu_pos, mu_neg) cells, 1,000 batches
# of 1 positive + 127 negatives each; common random numbers make the map smooth.
protocol = simulate.Protocol()
met = gradlab.get_loss("met", m=0.45)
mc = simulate.gd_map(met, protocol)

# MET's GD is an indicator: its mean is a 1-D integral, computed by quadrature.
exact = simulate.gd_map(met, protocol, exact=True)
# Compare on the estimator's own standard error sqrt(p (1 - p) / B), p from quadrature: with
# common random numbers most cells see GD = 0 or 1 in every batch, so the sample stderr is 0.
p = np.asarray(exact.mean)
se = np.sqrt(np.clip(p * (1 - p), 0, None) / protocol.batches)
within = np.abs(mc.mean - p) <= 4 * np.maximum(se, 1e-12)
print(f"Monte-Carlo vs quadrature: {within.mean():.1%} of cells within 4 standard errors")
# Where p is within ~1e-4 of 0 or 1 the normal approximation behind "4 standard errors"
# fails: a single batch out of 1,000 is already many "standard errors". The exact test:
# each cell's count of GD = 1 batches is Binomial(B, p). Bonferroni over the cells holds
# even though common random numbers make the cells dependent.
count = np.round(mc.mean * protocol.batches).astype(int)
tail = np.minimum(stats.binom.cdf(count, protocol.batches, p), stats.binom.sf(count - 1, protocol.batches, p))
p_adjusted = min(1.0, 2 * tail.min() * p.size)
print(f"exact binomial test, smallest Bonferroni-adjusted p-value over the cells: {p_adjusted:.3g}")

# Where does GD switch off? The first mu_neg at which mean GD < 0.5, for three mu_pos rows.
for i in (0, 49, 99):
    j = int(np.argmax(mc.mean[i] < 0.5))
    print(f"mu_pos = {mc.mu_pos[i]:.3f}: GD < 0.5 from mu_neg = {mc.mu_neg[j]:.3f}")

# Results are plain arrays + metadata, saved atomically and reloaded without loss.
npz, meta = mc.save("/tmp/met_gd")
again = Result.load("/tmp/met_gd")
assert np.array_equal(again.mean, mc.mean)
print("saved", npz, meta)
