"""Data: text in, token ids and batches out.

Tokenizers (``tokenizers.py``; the interface in ``tokenizer_base.py``, BPE/unigram in
``sentencepiece_tokenizer.py``) with text normalization
(``normalize.py``), reading files with clear errors (``corpus.py``), named and bundled corpora
(``datasets.py``), dictionary pairs (``lexicon.py``), what every task's data shares: the hold-out,
tokenizer and class fitting (``pipeline.py``; each task reads its own data in ``seqmap.tasks``), which
examples form a batch (``samplers.py``) and their padded tensors (``batching.py``), and the synthetic
toy tasks re-exported here (``synthetic.py``).
"""

from seqmap.data.batching import Batch
from seqmap.data.synthetic import BOS, EOS, PAD, TASKS, SyntheticTask, render, strip

__all__ = ["BOS", "EOS", "PAD", "TASKS", "Batch", "SyntheticTask", "render", "strip"]
