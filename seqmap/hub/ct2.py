"""``seqmap export ct2 RUN_DIR --out DIR``: a run as a CTranslate2 model, for deployment.

The run is exported in the ``transformers`` format first (``seqmap.hub.export``: GPT-2 or MarianMT), into a
temporary directory, and CTranslate2's own converter (``ctranslate2.converters.TransformersConverter``) turns
that into ``DIR``. Load it with ``ctranslate2.Translator`` (a translation run) or ``ctranslate2.Generator`` (a
language model); both take token strings, which the exported tokenizer gives
(``AutoTokenizer.from_pretrained`` on the hf export, or the run's own tokenizer).

CTranslate2's MarianMT reading makes two assumptions, which this module checks before converting:

* the pad token is the last id of the vocabulary (it is dropped, as in Marian's own vocabulary);
* the decoder starts from a zero embedding (Marian's pad row).

Both hold for an imported OPUS-MT model; a seqmap-trained Transformer (PAD is id 0, decoding starts from a
trained BOS embedding) breaks them, and is refused in one line, as is a run whose tokenizer is not written in
a form ``transformers`` loads. ``ctranslate2`` comes with the ``ct2`` extra (``pip install -e ".[ct2]"``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.tokenizer_base import BOS
from seqmap.hub.export import export_hf
from seqmap.hub.source import HubError

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def _ct2_compatible(run) -> str | None:
    """Why CTranslate2's converter would not reproduce this run (None when it would)."""
    tok = run.tgt_tok
    if run.cfg.model.family == "transformer":
        if not isinstance(tok, HFTokenizer) or tok.roles.get("pad") != tok.hf_vocab - 1:
            return ("CTranslate2 reads a MarianMT model's last token as its pad token and drops it, but this run's "
                    "pad token is not last (a seqmap-trained Transformer: PAD is id 0)")
        if bool(run.model.state_dict()["decoder.embedding.table.weight"][BOS].abs().max() > 0):
            return ("CTranslate2 starts a MarianMT decoder from a zero embedding, but this run's start (BOS) "
                    "embedding is not zero (it was trained or fine-tuned in seqmap)")
    elif tok.kind not in ("char", "word", "hf"):
        return f"its {tok.kind} tokenizer is not exported in a form transformers loads (tokenizer.json)"
    return None


def export_ct2(run, out_dir: str | os.PathLike, quantization: str | None = None) -> Path:
    """Write the run as a CTranslate2 model directory; returns ``out_dir``."""
    try:
        from ctranslate2.converters import TransformersConverter
    except ImportError:
        raise HubError("seqmap export ct2 needs ctranslate2: pip install -e \".[ct2]\"") from None
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise HubError(f"--quantization {quantization!r} is not one of CTranslate2's: {', '.join(QUANTIZATIONS)}")
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise HubError(f"{out} exists and is not empty; choose another --out directory")
    if run.cfg.model.family in ("transformer", "lm"):
        why = _ct2_compatible(run)
        if why is not None:
            raise HubError(f"{run.checkpoint}: {why}; export it with seqmap export hf instead")
    with tempfile.TemporaryDirectory() as tmp:
        export_hf(run, tmp)  # refuses families and options with no transformers equivalent, in one line
        try:
            TransformersConverter(tmp).convert(str(out), quantization=quantization, force=True)
        except (NotImplementedError, ValueError, RuntimeError) as e:
            raise HubError(f"CTranslate2's converter refused {run.checkpoint}: {' '.join(str(e).split())[:200]}"
                           ) from None
    return out
