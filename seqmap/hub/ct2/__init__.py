"""CTranslate2: a run exported as a CTranslate2 model (``seqmap export ct2``), and decoding with the export.

Two routes to an export, one per kind of run (``export``):

* **A seqmap-trained Transformer or decoder-only LM** (``family: transformer`` or ``lm`` with seqmap's own
  tokenizer) is written straight into CTranslate2's model specification, weight by weight (``spec``).
  The vocabulary is the tokenizer's pieces in id order, so ids stay seqmap's (0 PAD, 1 BOS = the decoder
  start, 2 EOS, 3 UNK).
* **An imported model** (a MarianMT, a GPT-2, a T5) is exported in the ``transformers`` format first
  (``seqmap.hub.export``) and CTranslate2's own converter turns that into the export.

Every export records the checkpoint it was written from (``record``). ``load`` opens an export on the CPU
and checks that it is the run's; ``decode`` translates and generates with it as ``seqmap translate`` and
``seqmap generate`` do with the run (the same length limit per sentence, PAD, BOS and UNK never generated):
``seqmap translate RUN --ct2 DIR``, ``seqmap generate RUN --ct2 DIR``.

Load an export with ``ctranslate2.Translator`` (a translation run) or ``ctranslate2.Generator`` (a language
model); both take token strings: the run's tokenizer's ``pieces``. Options CTranslate2 has no equivalent for
are refused in one line naming them. ``ctranslate2`` comes with the ``ct2`` extra (``pip install -e ".[ct2]"``).
"""

from seqmap.hub.ct2.decode import export_positions, generate_ct2_nbest, translate_ct2, translate_ct2_nbest
from seqmap.hub.ct2.export import QUANTIZATIONS, export_ct2, writes_spec
from seqmap.hub.ct2.load import (
    Int8DriftWarning,
    check_export,
    load_generator,
    load_translator,
    open_export,
    probe_difference,
    refuse_gpu_options,
)
from seqmap.hub.ct2.record import SOURCE_RECORD, checkpoint_digest, read_source_record
from seqmap.hub.ct2.spec import lm_spec, transformer_spec

__all__ = ["QUANTIZATIONS", "SOURCE_RECORD", "Int8DriftWarning", "check_export", "checkpoint_digest", "export_ct2",
           "export_positions", "generate_ct2_nbest", "lm_spec", "load_generator", "load_translator", "open_export",
           "probe_difference", "read_source_record", "refuse_gpu_options", "transformer_spec", "translate_ct2",
           "translate_ct2_nbest", "writes_spec"]
