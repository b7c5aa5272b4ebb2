"""Pretrained models from and to the Hugging Face format (issue 15): ``seqmap import hf``.

    from seqmap.hub import import_hf
    import_hf("path/to/saved_pretrained_dir", "runs/gpt2")   # an ordinary run directory

See ``seqmap.hub.hf`` for what each architecture maps onto.
"""

from seqmap.hub.export import export_hf
from seqmap.hub.hf import HubError, import_hf

__all__ = ["HubError", "export_hf", "import_hf"]
