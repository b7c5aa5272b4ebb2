"""Pretrained models from and to the Hugging Face format: ``seqmap import hf``, ``seqmap export hf|ct2``.

    from seqmap.hub import import_hf, export_hf
    import_hf("path/to/saved_pretrained_dir", "runs/gpt2")   # an ordinary run directory
    export_hf(load_run("runs/gpt2-mine"), "exported/gpt2-mine")

See ``seqmap.hub.hf`` (Marian, GPT-2), ``seqmap.hub.t5`` (T5, Flan-T5, mT5; both ways) and ``seqmap.hub.encoders``
(BERT, ViT) for what each architecture maps onto, ``seqmap.hub.export`` and ``seqmap.hub.ct2`` for the way back.
"""

from seqmap.hub.ct2 import export_ct2
from seqmap.hub.export import export_hf
from seqmap.hub.hf import import_hf
from seqmap.hub.source import HubError

__all__ = ["HubError", "export_ct2", "export_hf", "import_hf"]
