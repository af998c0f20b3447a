"""The FLOPs of a training step from the model's shapes (:func:`transformer_step_flops`),
which ``gradlab train --plan`` reports (:mod:`gradlab.real.plan`) and by which a packed
batch's width is chosen (:class:`gradlab.real.batches.Batches`).

FLOPs of one step (matrix multiplications only; one multiply-add = 2 FLOPs):

    F_step = 3 × 2 × F_view        (forward + backward ≈ 3 × forward; two dropout views)

with F_view the forward of one view of the batch. For a BERT / RoBERTa encoder on a
packed batch of R rows of C tokens (T = R·C tokens, S sentences), L layers, hidden size
H and feed-forward size I:

    F_view = L × [2T(4H² + 2HI) + 4RC²H] + 2SH² (the pooler / SimCSE MLP, when trained)
             + 2STH (pooling: each sentence's tokens summed, or its first picked, as one product)

(Q, K, V and output projections 8TH², feed-forward 4THI, attention scores and values
4RC²H; a padded batch, as torch runs it, has no pooling product: S = R, C = L). A [CLS]
pooling, where its scores fit (``gradlab.real.bert.first_only_fits``), runs the last layer's queries, output projection and feed-forward for the S first
tokens alone, and needs no pooling product: its last layer costs 4TH² (keys and values)
+ 2S(2H² + 2HI) + 4STH instead (each query scores every token of the batch, all but its own
sentence's masked: 4SCH padded). For the light encoder (mean of token embeddings, then a
(H, D) projection) on a batch of B sentences: F_view = 2BHD.
"""

from __future__ import annotations

__all__ = ["transformer_step_flops", "light_step_flops"]


def transformer_step_flops(config, rows: int, width: int, sentences: int, *, pooler: bool,
                           packed: bool = False, first_only: bool = False) -> int:
    """F_step = 3 × 2 × F_view of the module docstring for a BERT / RoBERTa ``config``
    (``num_hidden_layers``, ``hidden_size``, ``intermediate_size``) on ``rows`` × ``width``
    tokens holding ``sentences`` sentences; ``pooler``: a trained (H, H) pooler / MLP;
    ``packed``: packed rows, pooled by a product over their tokens; ``first_only``: the last
    layer run for the sentences' first tokens alone (a [CLS] pooling; no pooling product).

    Examples:
      >>> from types import SimpleNamespace
      >>> bert_base = SimpleNamespace(num_hidden_layers=12, hidden_size=768, intermediate_size=3072)
      >>> transformer_step_flops(bert_base, 64, 32, 64, pooler=True) / 1e12  # SimCSE's batch, 32 tokens each
      2.102302605312
      >>> transformer_step_flops(bert_base, 64, 32, 64, pooler=True, packed=True, first_only=True) / 1e12
      1.963085266944
    """
    H, I, L = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    T = rows * width
    layer = 2 * T * (4 * H * H + 2 * H * I) + 4 * rows * width * width * H
    if first_only:
        last = (2 * T * 2 * H * H + 2 * sentences * (2 * H * H + 2 * H * I)
                + 4 * sentences * (T if packed else width) * H)
        f_view = (L - 1) * layer + last
    else:
        f_view = L * layer + (2 * sentences * T * H if packed else 0)
    if pooler:
        f_view += 2 * sentences * H * H
    return 6 * f_view


def light_step_flops(sentences: int, hidden: int, dim: int) -> int:
    """F_step = 3 × 2 × F_view, F_view = 2BHD, for the light encoder's (H, D) projection of a batch
    of B ``sentences``.

    Examples:
      >>> light_step_flops(64, 384, 256) / 1e6  # SimCSE's batch through MiniLM's embeddings, D = 256
      75.497472
    """
    return 6 * 2 * sentences * hidden * dim
