"""``seqmap export ct2 RUN_DIR --out DIR``: a run as a CTranslate2 model directory, by one of two routes.

* A seqmap-trained Transformer or decoder-only LM is written straight into CTranslate2's specification
  (``seqmap.hub.ct2.spec``).
* An imported model (a MarianMT, a GPT-2, a T5) is exported in the ``transformers`` format first
  (``seqmap.hub.export``), into a temporary directory, and CTranslate2's own converter
  (``ctranslate2.converters.TransformersConverter``) turns that into ``DIR``. CTranslate2's MarianMT reading
  assumes that the pad token is the vocabulary's last id and that the decoder starts from a zero embedding;
  both hold for an imported OPUS-MT model, and are checked. Its T5 reading rescales the decoder output wherever
  ``transformers`` says ``tie_word_embeddings``, which ``transformers`` 5 says of every T5: a T5 v1.0 (tied and
  rescaled) converts, a T5 v1.1 or Flan-T5 (untied, not rescaled) is refused in one line there.

Either way the export records the checkpoint it came from (``seqmap.hub.ct2.record``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.tokenizer_base import BOS
from seqmap.hub.ct2.load import import_ctranslate2
from seqmap.hub.ct2.record import write_source_record
from seqmap.hub.ct2.spec import KINDS, lm_spec, transformer_spec
from seqmap.hub.export import export_hf, fresh_out
from seqmap.hub.source import HubError

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def export_ct2(run, out_dir: str | os.PathLike, quantization: str | None = None) -> Path:
    """Write the run as a CTranslate2 model directory; returns ``out_dir``."""
    import_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise HubError(f"--quantization {quantization!r} is not one of CTranslate2's: {', '.join(QUANTIZATIONS)}")
    family = run.cfg.model.family
    if family not in KINDS:
        raise HubError(f"{run.checkpoint}: model.family={family}; CTranslate2 takes an "
                       f"{' or a '.join(f'{kind} (family {name})' for name, kind in KINDS.items())}")
    out = fresh_out(out_dir)
    if writes_spec(run):
        spec = transformer_spec(run) if run.cfg.model.family == "transformer" else lm_spec(run)
        spec.validate()
        spec.optimize(quantization=quantization)
        out.mkdir(parents=True, exist_ok=True)
        spec.save(str(out))
        write_source_record(run, out, quantization)
        return out
    why = _t5_readable(run) if run.cfg.model.positional == "t5" else _marian_readable(run)
    if why is not None:
        raise HubError(f"{run.checkpoint}: {why}; export it with seqmap export hf instead")
    from ctranslate2.converters import TransformersConverter

    with tempfile.TemporaryDirectory() as tmp:
        export_hf(run, tmp)  # refuses families and options with no transformers equivalent, in one line
        try:
            TransformersConverter(tmp).convert(str(out), quantization=quantization, force=True)
        except (NotImplementedError, ValueError, RuntimeError) as e:
            raise HubError(f"CTranslate2's converter refused {run.checkpoint}: {' '.join(str(e).split())[:200]}"
                           ) from None
    write_source_record(run, out, quantization)
    return out


def writes_spec(run) -> bool:
    """Whether ``export_ct2`` writes the run straight into CTranslate2's specification (a seqmap-trained
    Transformer or decoder-only LM) rather than through the hf export and CTranslate2's converter."""
    return run.cfg.model.family in ("transformer", "lm") and not isinstance(run.tgt_tok, HFTokenizer)


def _marian_readable(run) -> str | None:
    """Why CTranslate2's MarianMT converter would not reproduce this imported run (None when it would)."""
    tok = run.tgt_tok
    if run.cfg.model.family == "transformer":
        if tok.roles.get("pad") != tok.hf_vocab - 1:
            return ("CTranslate2 reads a MarianMT model's last token as its pad token and drops it, but this run's "
                    "pad token is not last")
        if bool(run.model.state_dict()["decoder.embedding.table.weight"][BOS].abs().max() > 0):
            return ("CTranslate2 starts a MarianMT decoder from a zero embedding, but this run's start (BOS) "
                    "embedding is not zero (it was fine-tuned in seqmap)")
    return None


def _t5_readable(run) -> str | None:
    """Why CTranslate2's T5 converter would not reproduce this imported T5 (None when it would). The converter
    rescales the decoder output by d_model**-0.5 exactly where the loaded config says ``tie_word_embeddings``, and
    transformers 5 says so for every T5, its v1.1 and Flan-T5 (untied, not rescaled) included."""
    from transformers import T5Config

    m = run.cfg.model
    tied = m.tie_embeddings and m.scale_output  # as seqmap.hub.t5 exports it
    if bool(T5Config(tie_word_embeddings=tied).tie_word_embeddings) != m.scale_output:
        return ("CTranslate2's T5 converter rescales the decoder output where transformers' config says "
                "tie_word_embeddings, which this transformers sets for every T5, but this run's output is not "
                "rescaled (model.scale_output=false: T5 v1.1, Flan-T5)")
    return None
