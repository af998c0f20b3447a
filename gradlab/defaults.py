"""The papers' default settings, in one place (a leaf module: no JAX, no gradlab imports).

Each constant names where it comes from. Values marked *ours* are choices of this
project where the papers give no number; every consumer (``gradlab.simulate``,
``gradlab.monitor``, ``gradlab.lemma1``, the CLI) imports them from here.

The Monte-Carlo protocol's defaults (σ_pos, σ_neg, grids, batch shape) are here and
``gradlab.simulate.Protocol`` reads them; the per-loss hyper-parameters live in the loss
registry (``gradlab.losses.get_spec(name).defaults``), the one place a loss is described.

Examples:
  >>> from gradlab import defaults
  >>> defaults.TAUS
  (0.3, 0.1, 0.05, 0.03, 0.01, 0.005)
"""

from __future__ import annotations

import math

__all__ = [
    "GRID",
    "MU_POS_RANGE",
    "MU_NEG_RANGE",
    "SIGMA_POS",
    "SIGMA_NEG",
    "BATCHES",
    "BATCH_SIZE",
    "TAUS",
    "WEIGHT_MU_POS",
    "GD_THRESHOLD",
    "LEMMA1_LAM",
    "LEMMA1_LAMS",
    "LEMMA1_RATIOS",
    "LEMMA1_MU_POS",
    "LEMMA1_MU_NEG",
    "MIN_RATIO_QUANTILES",
    "MONITOR_QUANTILES",
    "MONITOR_LOSSES",
    "MONITOR_RATIO_LOSSES",
    "MONITOR_LAMS",
    "NORM_NEGATIVES",
    "NORM_INFONCE_NEGATIVES",
    "RANKME_EPS",
    "RANKME_WINDOW",
    "RHO2023_TAU",
    "RHO2023_BETA",
    "SIMCSE_TAU",
    "SIMCSE_MAX_SEQ_LENGTH",
    "SIMCSE_DROPOUT",
    "SIMCSE_EVAL_EVERY",
    "SIMCSE_EPOCHS",
    "SIMCSE_UNSUP_BATCH_SIZE",
    "SIMCSE_UNSUP_LR",
    "ENCODER_LR",
    "STATUS_INTERVAL_S",
    "CONFIDENCE",
]

#: The Monte-Carlo protocol of Li et al. 2024 App. A.1: a G × G grid of (μ_pos, μ_neg)
#: (100 points per axis), μ_pos ∈ [π/20, π/2], μ_neg ∈ [π/20, π], θ_ii' ~ N(μ_pos, 0.05²),
#: θ_ij' ~ N(μ_neg, 0.1²), B = 1000 batches of N = 128 (1 positive, N − 1 negatives) per cell.
GRID = 100
MU_POS_RANGE = (math.pi / 20, math.pi / 2)
MU_NEG_RANGE = (math.pi / 20, math.pi)
SIGMA_POS = 0.05
SIGMA_NEG = 0.10
BATCHES = 1000
BATCH_SIZE = 128

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

#: Quantiles of the minimum-ratio distribution (the simulated and the monitored Fig. 8a of
#: Li et al. 2024, ``lemma1.summarize_min_ratio``): *ours*; the sample is large (every
#: anchor of every batch), so the 5 % tails are well estimated.
MIN_RATIO_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)

#: Quantiles of the per-step Lemma-1 record of the training monitor (``q10`` … ``q90``):
#: *ours*; one step sees one batch of N anchors (N = 64 in the studies), where a 5 % tail
#: is three values, so the monitor reports 10 % tails.
MONITOR_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)

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

#: Rho et al. 2023 App. C: τ = 0.25 (C.1, MoCov3 and SimCLR) and Eq. 3's β = 1 (MoCo / SimCLR):
#: the defaults of their margins, transforms and figures.
RHO2023_TAU = 0.25
RHO2023_BETA = 1.0

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

#: Adam learning rate of a run by encoder when none is given: ``minilm`` and any BERT / RoBERTa
#: checkpoint take SimCSE's BERT-base rate (Gao et al. 2021, Table A.1); ``light`` (a linear
#: projection over frozen token embeddings, ours) trains at 1e-3.
ENCODER_LR = {"light": 1e-3, "minilm": 3e-5}

#: Unsupervised learning rate by (model type, size) (Gao et al. 2021, Table A.1).
SIMCSE_UNSUP_LR = {("bert", "base"): 3e-5, ("bert", "large"): 1e-5, ("roberta", "base"): 1e-5,
                   ("roberta", "large"): 3e-5}

#: Seconds between two status lines of a long run without a terminal (a SLURM log, a pipe): *ours*
#: (``gradlab.progress.StatusLine``; ``GRADLAB_STATUS_INTERVAL_S`` overrides it).
STATUS_INTERVAL_S = 60.0

#: Confidence level of the intervals over seeds that ``gradlab compare`` reports (Student's t): *ours*.
CONFIDENCE = 0.95
