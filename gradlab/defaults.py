"""The papers' default settings, in one place (a leaf module: no JAX, no gradlab imports).

Each constant names where it comes from. Values marked *ours* are choices of this
project where the papers give no number; every consumer (``gradlab.simulate``,
``gradlab.monitor``, ``gradlab.lemma1``, the CLI) imports them from here.

The Monte-Carlo protocol itself (σ_pos, σ_neg, grids, batch shape) lives in
``gradlab.simulate.Protocol``; the per-loss hyper-parameters live in the loss registry
(``gradlab.losses.get_spec(name).defaults``).

Examples:
  >>> from gradlab import defaults
  >>> defaults.TAUS
  (0.3, 0.1, 0.05, 0.03, 0.01, 0.005)
"""

from __future__ import annotations

import math

__all__ = [
    "TAUS",
    "WEIGHT_MU_POS",
    "GD_THRESHOLD",
    "LEMMA1_LAM",
    "LEMMA1_LAMS",
    "LEMMA1_RATIOS",
    "LEMMA1_MU_POS",
    "LEMMA1_MU_NEG",
    "QUANTILES",
    "MONITOR_LOSSES",
    "MONITOR_RATIO_LOSSES",
    "MONITOR_LAMS",
    "NORM_NEGATIVES",
    "NORM_INFONCE_NEGATIVES",
    "RANKME_EPS",
    "RANKME_WINDOW",
    "SIMCSE_TAU",
    "SIMCSE_MAX_SEQ_LENGTH",
    "SIMCSE_DROPOUT",
    "SIMCSE_EVAL_EVERY",
    "SIMCSE_EPOCHS",
    "SIMCSE_UNSUP_BATCH_SIZE",
    "SIMCSE_UNSUP_LR",
]

#: The six temperatures of the hardest-negative share, Li et al. 2024 Figs. 3 and 7.
TAUS = (0.3, 0.1, 0.05, 0.03, 0.01, 0.005)

#: The fixed μ_pos of the weight-share curves, Li et al. 2024 Fig. 3 (App. A.1): π/6.
WEIGHT_MU_POS = math.pi / 6

#: Mean GD below which a cell counts as "gradient switched off" and is shaded in the
#: ratio maps (Li et al. 2024 Fig. 4 shades such cells but gives no number): *ours*.
GD_THRESHOLD = 0.05

#: The λ of the Lemma-1 map (Li et al. 2024 Lemma 1, Sec. 3.1.3): *ours*, one of
#: ``LEMMA1_LAMS``.
LEMMA1_LAM = 0.1

#: The step sizes λ of the minimum-ratio distribution, Li et al. 2024 Fig. 8a (read from
#: the figure's legend).
LEMMA1_LAMS = (0.01, 0.1, 0.5, 1.0)

#: Static ratios r tested against Lemma 1: *ours*, spanning the ratios of Li et al. 2024's
#: modified losses (r = 1 for the baseline up to the dynamic ratios' range in Fig. 8b).
LEMMA1_RATIOS = (1.0, 1.25, 1.5, 1.75, 2.0)

#: The cell (μ_pos, μ_neg) of the *simulated* Fig. 8a (the paper measures BERT
#: embeddings instead): *ours*, μ_pos as in Fig. 3 and μ_neg = 2 μ_pos.
LEMMA1_MU_POS = math.pi / 6
LEMMA1_MU_NEG = math.pi / 3

#: Quantiles reported by the minimum-ratio summaries: *ours*.
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

#: Losses whose GD the training monitor records: the effective losses of Li et al. 2024
#: Fig. 2 (InfoNCE, ArcCon, MPT, MET, MAT).
MONITOR_LOSSES = ("infonce", "arccon", "mpt", "met", "mat")

#: Losses whose dynamic ratio the monitor records: Li et al. 2024 Figs. 4 and 8b
#: (ArcCon, MET, MAT).
MONITOR_RATIO_LOSSES = ("arccon", "met", "mat")

#: Step sizes λ of the monitor's Lemma-1 statistics: *ours*, a subset of ``LEMMA1_LAMS``
#: (one record per λ per step, so fewer than the figure's).
MONITOR_LAMS = (0.1, 0.5, 1.0)

#: The number of negatives K of Nie et al. 2023's gradient-norm maps ("under the
#: condition of 64 negative sample size").
NORM_NEGATIVES = 64

#: The K of the InfoNCE panels of Nie et al. 2023 Fig. 2 (one panel per K).
NORM_INFONCE_NEGATIVES = (64, 512, 4096, 32768)

#: RankMe's ε in p_k = σ_k / Σσ + ε (Garrido et al. 2023, Eq. 1: 1e-7).
RANKME_EPS = 1e-7

#: Rows in the monitor's RankMe / α-ReQ window: *ours*. RankMe needs many rows compared
#: with D (768 for MiniLM), so the monitor pools recent batches up to this many rows.
RANKME_WINDOW = 4096

# SimCSE's unsupervised recipe (Gao et al. 2021), the ``simcse-unsup`` recipe of ``gradlab.real``.

#: InfoNCE's temperature τ of SimCSE (Gao et al. 2021, Sec. 2 and Table D.1: τ = 0.05).
SIMCSE_TAU = 0.05

#: Maximum training sequence length in tokens (Gao et al. 2021's unsupervised training
#: script, ``run_unsup_example.sh``: ``--max_seq_length 32``); evaluation is not truncated.
SIMCSE_MAX_SEQ_LENGTH = 32

#: Dropout rate p of the two views (Gao et al. 2021, Sec. 3 and Table 2: the default p = 0.1
#: of BERT / RoBERTa, hidden and attention dropout).
SIMCSE_DROPOUT = 0.1

#: Steps between STS-B dev evaluations, the best checkpoint kept (Gao et al. 2021, App. A).
SIMCSE_EVAL_EVERY = 250

#: Passes over the one-sentence-per-line corpus (Gao et al. 2021, App. A: one epoch unsupervised).
SIMCSE_EPOCHS = 1

#: Unsupervised batch size by (model type, size) (Gao et al. 2021, Table A.1).
SIMCSE_UNSUP_BATCH_SIZE = {("bert", "base"): 64, ("bert", "large"): 64, ("roberta", "base"): 512,
                           ("roberta", "large"): 512}

#: Unsupervised learning rate by (model type, size) (Gao et al. 2021, Table A.1).
SIMCSE_UNSUP_LR = {("bert", "base"): 3e-5, ("bert", "large"): 1e-5, ("roberta", "base"): 1e-5,
                   ("roberta", "large"): 3e-5}
