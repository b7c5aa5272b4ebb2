"""``seqmap export ct2 RUN_DIR --out DIR``: a run as a CTranslate2 model, for deployment at CTranslate2's speed.

Two routes, one per kind of run:

* **A seqmap-trained Transformer or decoder-only LM** (``family: transformer`` or ``lm`` with seqmap's own
  tokenizer) is written straight into CTranslate2's model specification (``ctranslate2.specs.TransformerSpec``
  or ``TransformerDecoderModelSpec``: its public API for converters), weight by weight: pre- or post-LN,
  LayerNorm or RMSNorm with the run's epsilon, sinusoidal (either column layout) or learned positions as an
  explicit table (an LM also: none, rope, ALiBi, and grouped key/value heads), the run's embedding scale, relu, gelu,
  gelu_tanh, silu, swiglu, geglu or geglu_tanh, linears with or without biases, attention scaled or not
  (``scale_attention``), heads of their own width (``head_dim``), shared or separate vocabularies, a tied or separate
  output layer and its bias, a translator's output rescale (``scale_output``). The vocabulary is the tokenizer's
  pieces in id order, so ids stay seqmap's (0 PAD, 1 BOS = the decoder start, 2 EOS, 3 UNK). ``translate_ct2`` decodes
  with it as ``seqmap translate`` decodes with the run (the same length limit per sentence, PAD, BOS and UNK never
  generated): ``seqmap translate RUN --ct2 DIR``; ``generate_ct2_nbest`` continues prompts as ``seqmap generate``
  does: ``seqmap generate RUN --ct2 DIR``.
* **An imported model** (a MarianMT, a GPT-2, a T5) is exported in the ``transformers`` format first
  (``seqmap.hub.export``), into a temporary directory, and CTranslate2's own converter
  (``ctranslate2.converters.TransformersConverter``) turns that into ``DIR``. CTranslate2's MarianMT reading
  assumes that the pad token is the vocabulary's last id and that the decoder starts from a zero embedding;
  both hold for an imported OPUS-MT model, and are checked. Its T5 reading rescales the decoder output wherever
  ``transformers`` says ``tie_word_embeddings``, which ``transformers`` 5 says of every T5: a T5 v1.0 (tied and
  rescaled) converts, a T5 v1.1 or Flan-T5 (untied, not rescaled) is refused in one line there.

Load the result with ``ctranslate2.Translator`` (a translation run) or ``ctranslate2.Generator`` (a language
model); both take token strings: the run's tokenizer's ``pieces``. Options CTranslate2 has no equivalent for
are refused in one line naming them. ``ctranslate2`` comes with the ``ct2`` extra (``pip install -e ".[ct2]"``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from seqmap.config import DecodeConfig, ModelConfig
from seqmap.data.hf_tokenizer import HFTokenizer
from seqmap.data.tokenizer_base import BOS, EOS, NEVER_GENERATED, UNK
from seqmap.decoding.ranking import length_norm
from seqmap.decoding.text import Scored
from seqmap.hub.export import export_hf, fresh_out
from seqmap.hub.source import HubError
from seqmap.nn.layers import GATED
from seqmap.training.checkpoint_files import MODEL_FILE

QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
# seqmap's feed-forward activations and CTranslate2's names for them (ctranslate2.specs.Activation)
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_tanh": "GELUTanh", "silu": "SWISH", "swiglu": "SWISH",
                "geglu": "GELU", "geglu_tanh": "GELUTanh"}


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise HubError("CTranslate2 is not installed: pip install -e \".[ct2]\"") from None
    return ctranslate2


def export_ct2(run, out_dir: str | os.PathLike, quantization: str | None = None) -> Path:
    """Write the run as a CTranslate2 model directory; returns ``out_dir``."""
    _ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise HubError(f"--quantization {quantization!r} is not one of CTranslate2's: {', '.join(QUANTIZATIONS)}")
    family = run.cfg.model.family
    if family not in _KINDS:
        raise HubError(f"{run.checkpoint}: model.family={family}; CTranslate2 takes an "
                       f"{' or a '.join(f'{kind} (family {name})' for name, kind in _KINDS.items())}")
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


# -- which checkpoint an export came from ----------------------------------------------------------------

SOURCE_RECORD = "seqmap_source.json"  # written into every export: the digest of the checkpoint it came from


@functools.lru_cache(maxsize=8)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def checkpoint_digest(run) -> str:
    """SHA-256 of the run's weights file: the identity of the checkpoint an export is checked against (exact on
    every CPU, unlike a comparison of scores, which int8 kernels move by different amounts on different ISAs)."""
    path = Path(run.checkpoint) / MODEL_FILE
    stat = path.stat()
    return _file_digest(str(path), stat.st_size, stat.st_mtime_ns)


def write_source_record(run, out: Path, quantization: str | None) -> None:
    """Record in the export which checkpoint it was written from and how its weights are stored."""
    from seqmap import __version__

    record = {"checkpoint_sha256": checkpoint_digest(run), "checkpoint": str(run.checkpoint),
              "quantization": quantization or "float32", "seqmap": __version__}
    (out / SOURCE_RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def read_source_record(path: Path) -> dict | None:
    """The export's record of its checkpoint; None for an export without one (another converter, an older
    seqmap); a HubError naming the file when it is damaged."""
    file = path / SOURCE_RECORD
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        digest = record["checkpoint_sha256"]
        if not isinstance(digest, str):
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise HubError(f"{file} is damaged (no checkpoint_sha256 in its JSON); write the export again with "
                       "seqmap export ct2 RUN_DIR --out DIR") from None
    return record


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


# -- a seqmap-trained Transformer, straight into CTranslate2's specification ----------------------------


def _spec_compatible(m: ModelConfig) -> str | None:
    """Why a seqmap Transformer or decoder-only LM has no CTranslate2 equivalent (None when it has one)."""
    positions = ("sinusoidal", "learned", "none", "rope", "alibi") if m.family == "lm" else ("sinusoidal", "learned")
    if m.positional not in positions:
        return (f"model.positional={m.positional!r} (CTranslate2's {_KINDS[m.family]} takes {', '.join(positions)})")
    if m.activation not in _ACTIVATIONS:
        return f"model.activation={m.activation!r} (CTranslate2 takes {', '.join(_ACTIVATIONS)} here)"
    if m.family == "transformer" and m.n_kv_heads not in (None, m.n_heads):
        return f"model.n_kv_heads={m.n_kv_heads} (exported with one key/value head per query head only)"
    if m.copy:
        return "model.copy=true (CTranslate2 has no pointer-generator copy head)"
    return None


_KINDS = {"transformer": "encoder-decoder Transformer", "lm": "decoder-only model"}


def _vocabulary(tok, side: str) -> list[str]:
    """The tokenizer's pieces in id order; CTranslate2 maps token strings to ids, so they must be distinct."""
    pieces = tok.pieces(range(tok.vocab_size))
    if len(set(pieces)) != len(pieces):
        seen: set[str] = set()
        twice = next(p for p in pieces if p in seen or seen.add(p))
        raise HubError(f"the {side} tokenizer ({tok.kind}) names two ids {twice!r}; CTranslate2 needs distinct "
                       "token strings")
    return pieces


def _positions(positional, rows: int, d_model: int) -> Tensor:
    """The (rows, D) table a positional module adds to the embeddings at positions 0..rows-1."""
    with torch.no_grad():
        return positional.embed(torch.zeros(1, rows, d_model)).squeeze(0)


class _Weights:
    """Copies a run's weights, by seqmap's state-dict names, into the layers of a CTranslate2 specification."""

    def __init__(self, run):
        self.m = run.cfg.model
        # copies: CTranslate2 quantizes a specification's arrays in place, which would change the run's own weights
        self.sd = {k: v.detach().to(torch.float32, copy=True).contiguous() for k, v in run.model.state_dict().items()}

    def linear(self, dst, prefix: str, rows: slice = slice(None)) -> None:
        dst.weight = self.sd[f"{prefix}.weight"][rows].contiguous()
        if f"{prefix}.bias" in self.sd:
            dst.bias = self.sd[f"{prefix}.bias"][rows].contiguous()

    def norm(self, dst, prefix: str) -> None:
        dst.gamma = self.sd[f"{prefix}.weight"]
        if f"{prefix}.bias" in self.sd:  # RMSNorm has none
            dst.beta = self.sd[f"{prefix}.bias"]

    def attention(self, dst, prefix: str, cross: bool = False) -> None:
        if cross:  # CTranslate2: queries, then keys and values fused, then the output
            q_width = self.m.n_heads * (self.m.head_dim or self.m.d_model // self.m.n_heads)
            self.linear(dst.linear[0], f"{prefix}.in_proj", slice(0, q_width))
            self.linear(dst.linear[1], f"{prefix}.in_proj", slice(q_width, None))
        else:  # queries, keys and values fused as in seqmap (rows: H heads, then Hkv, then Hkv)
            self.linear(dst.linear[0], f"{prefix}.in_proj")
        self.linear(dst.linear[-1], f"{prefix}.out_proj")
        if not self.m.scale_attention:
            dst.queries_scale = 1.0

    def feed_forward(self, dst, prefix: str) -> None:
        if self.m.activation in GATED:  # seqmap's w1 holds W_gate then W_up; CTranslate2 keeps them apart
            f = self.m.d_ff
            self.linear(dst.linear_0, f"{prefix}.w1", slice(0, f))
            self.linear(dst.linear_0_noact, f"{prefix}.w1", slice(f, None))
        else:
            self.linear(dst.linear_0, f"{prefix}.w1")
        self.linear(dst.linear_1, f"{prefix}.w2")

    def embeddings(self, stack, prefix: str, ours, table: bool = True) -> None:
        """Token table, embedding scale and (``table``) the positions added to the embeddings."""
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = self.sd[f"{prefix}embedding.table.weight"]
        stack.scale_embeddings = float(ours.embedding.scale)
        if table:
            stack.position_encodings.encodings = _positions(ours.positional, self.m.max_len, self.m.d_model)

    def output(self, projection, prefix: str) -> None:
        projection.weight = self.sd[f"{prefix}output.weight"]
        if self.m.output_bias:
            projection.bias = self.sd[f"{prefix}output.bias"]


def _refuse_incompatible(run) -> None:
    why = _spec_compatible(run.cfg.model)
    if why is not None:
        raise HubError(f"{run.checkpoint}: {why}; this model has no CTranslate2 equivalent")


def _common(m: ModelConfig) -> dict:
    """``from_config`` options both specifications share."""
    from ctranslate2.specs import Activation

    return {"pre_norm": m.norm_position == "pre", "activation": getattr(Activation, _ACTIVATIONS[m.activation]),
            "ffn_glu": m.activation in GATED, "rms_norm": m.norm == "rmsnorm"}


def transformer_spec(run):
    """A seqmap-trained Transformer as a ``ctranslate2.specs.TransformerSpec`` (not yet validated or saved)."""
    from ctranslate2.specs import TransformerSpec

    _refuse_incompatible(run)
    m = run.cfg.model
    src_tokens, tgt_tokens = _vocabulary(run.src_tok, "source"), _vocabulary(run.tgt_tok, "target")
    spec = TransformerSpec.from_config((m.enc_layers, m.dec_layers), m.n_heads, **_common(m))
    w = _Weights(run)
    for side, stack, layers in (("encoder", spec.encoder, m.enc_layers), ("decoder", spec.decoder, m.dec_layers)):
        w.embeddings(stack, f"{side}.", getattr(run.model, side))
        if m.norm_position == "pre":
            w.norm(stack.layer_norm, f"{side}.final_norm")
        for i in range(layers):
            layer, p = stack.layer[i], f"{side}.layers.{i}"
            w.attention(layer.self_attention, f"{p}.self_attn")
            w.norm(layer.self_attention.layer_norm, f"{p}.norm1")
            if side == "decoder":
                w.attention(layer.attention, f"{p}.cross_attn", cross=True)
                w.norm(layer.attention.layer_norm, f"{p}.norm2")
            w.feed_forward(layer.ffn, f"{p}.ff")
            w.norm(layer.ffn.layer_norm, f"{p}.norm3" if side == "decoder" else f"{p}.norm2")
    w.output(spec.decoder.projection, "decoder.")
    if m.scale_output:
        spec.decoder.scale_outputs = m.d_model**-0.5
    spec.config.layer_norm_epsilon = m.norm_eps
    pieces = run.tgt_tok.pieces([BOS, EOS, UNK])
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = pieces
    spec.config.decoder_start_token = pieces[0]
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    return spec


def lm_spec(run):
    """A seqmap-trained decoder-only LM as a ``ctranslate2.specs.TransformerDecoderModelSpec`` (not yet validated
    or saved). Positions added to the embeddings (sinusoidal, learned, none) are written as a table of
    ``model.max_len`` rows, the most tokens the export reads; rope (half-split, as seqmap's) and ALiBi are
    computed in its attention, at any length."""
    from ctranslate2.specs import TransformerDecoderModelSpec

    _refuse_incompatible(run)
    m = run.cfg.model
    tokens = _vocabulary(run.tgt_tok, "LM")
    options = _common(m)
    if m.n_kv_heads not in (None, m.n_heads):
        options["num_heads_kv"] = m.n_kv_heads
    if m.positional == "rope":
        options.update(rotary_dim=m.d_model // m.n_heads, rotary_interleave=False, rotary_base=m.rope_base)
    elif m.positional == "alibi":
        options.update(alibi=True)
    spec = TransformerDecoderModelSpec.from_config(m.dec_layers, m.n_heads, **options)
    w, decoder = _Weights(run), spec.decoder
    w.embeddings(decoder, "", run.model, table=m.positional not in ("rope", "alibi"))
    if m.norm_position == "pre":
        w.norm(decoder.layer_norm, "final_norm")
    for i in range(m.dec_layers):
        layer, p = decoder.layer[i], f"layers.{i}"
        w.attention(layer.self_attention, f"{p}.self_attn")
        w.norm(layer.self_attention.layer_norm, f"{p}.norm1")
        w.feed_forward(layer.ffn, f"{p}.ff")
        w.norm(layer.ffn.layer_norm, f"{p}.norm2")
    w.output(decoder.projection, "")
    spec.config.layer_norm_epsilon = m.norm_eps
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = run.tgt_tok.pieces([BOS, EOS, UNK])
    spec.register_vocabulary(tokens)
    return spec


# -- decoding with an exported run ----------------------------------------------------------------------


@functools.cache
def _opened(kind: str):
    """``ctranslate2.Translator`` or ``Generator`` that also knows the tokens it can output (``target_tokens``:
    CTranslate2 refuses to suppress a token its vocabulary lacks, as an imported model's export lacks some)."""
    base = getattr(_ctranslate2(), kind)
    return type(kind, (base,), {"__doc__": base.__doc__, "target_tokens": None})


def _vocabularies(path: Path, lm: bool) -> list[list[str]]:
    """The export's vocabularies: [tokens] for an LM; [source, target] or [shared] for a translator."""
    names = (("vocabulary.json",) if lm else ("shared_vocabulary.json",)
             if (path / "shared_vocabulary.json").is_file() else ("source_vocabulary.json", "target_vocabulary.json"))
    try:
        return [[str(t) for t in json.loads((path / name).read_text(encoding="utf-8"))] for name in names]
    except (OSError, ValueError) as e:
        what = "language model's" if lm else "translation model's"
        raise HubError(f"{path} holds no readable CTranslate2 vocabulary for a {what} export ({e}); write it "
                       "again with seqmap export ct2 RUN_DIR --out DIR") from None


def _load(kind: str, ct2_dir: str | os.PathLike, threads: int, compute_type: str):
    path = Path(ct2_dir)
    if not (path / "model.bin").is_file():
        raise HubError(f"{path} holds no CTranslate2 model (no model.bin); write one with "
                       "seqmap export ct2 RUN_DIR --out DIR")
    try:
        model = _opened(kind)(str(path), device="cpu", compute_type=compute_type, intra_threads=threads,
                              inter_threads=1)
    except (RuntimeError, ValueError) as e:  # e.g. a Translator's export opened as a Generator
        raise HubError(f"{path} does not open as a CTranslate2 {kind}: {' '.join(str(e).split())[:200]}; "
                       "write it again with seqmap export ct2 RUN_DIR --out DIR") from None
    model.target_tokens = frozenset(_vocabularies(path, lm=kind == "Generator")[-1])
    return model


def load_translator(ct2_dir: str | os.PathLike, threads: int = 0, compute_type: str = "default"):
    """``ctranslate2.Translator`` on the CPU for a directory ``export_ct2`` wrote; one line when it is not one."""
    return _load("Translator", ct2_dir, threads, compute_type)


def load_generator(ct2_dir: str | os.PathLike, threads: int = 0, compute_type: str = "default"):
    """``ctranslate2.Generator`` (a language model's export) on the CPU; one line when it is not one."""
    return _load("Generator", ct2_dir, threads, compute_type)


def refuse_gpu_options(device, precision: str | None = None) -> None:
    """``--ct2`` runs CTranslate2 on the CPU in the export's compute type (or int8 with ``--quantize int8``): a GPU
    or a 16-bit ``--precision`` asked for beside it would be ignored, so a HubError refuses it (translate,
    evaluate, generate and serve check this before loading the run)."""
    if str(device) != "cpu":
        raise HubError(f"--ct2 runs CTranslate2 on the CPU; leave out --device {device} or --ct2")
    if precision not in (None, "fp32"):
        raise HubError(f"--precision {precision} is not available with --ct2 (it decodes in the export's compute "
                       "type, or int8 with --quantize int8); leave out --precision or --ct2")


def open_export(ct2_dir: str | os.PathLike, run, *, threads: int = 0, int8: bool = False, seed: int | None = None):
    """The ``ctranslate2.Translator`` (a translation run) or ``ctranslate2.Generator`` (a decoder-only LM) of
    ``run``'s export in ``ct2_dir`` (in int8 when asked), checked to be that run's (``check_export``): what
    ``--ct2`` of translate, evaluate, generate and serve opens. ``HubError`` if not.

    ``seed``: CTranslate2's sampling seed; it takes hold in the threads of a model opened after it is set,
    so the same seed gives the same samples from the model opened here."""
    if seed is not None:
        _ctranslate2().set_random_seed(seed)
    load = load_generator if run.src_tok is None else load_translator
    model = load(ct2_dir, threads=threads, compute_type="int8" if int8 else "default")
    check_export(ct2_dir, model, run, quantized=int8)
    return model


PROBE_TOKENS = 8  # source and target tokens of the pair the probe scores in both runtimes
INT8_DRIFT_WARNING = 1.0  # mean |log-probability| change on the probe above which int8 is reported as lossy


class Int8DriftWarning(UserWarning):
    """int8 moves this export's scores far from the float run's: its quality is worth measuring."""


def check_export(ct2_dir: str | os.PathLike, model, run, quantized: bool = False) -> None:
    """One line (``HubError``) unless ``ct2_dir`` holds an export of ``run`` (its checkpoint, not another's).

    ``model``: the export's ``ctranslate2.Translator`` (a translation run) or ``ctranslate2.Generator`` (an LM).
    Every output token of the export must be a piece of the run's target tokenizer (so outputs map back to its
    ids). Identity is then exact: the digest of the checkpoint that ``export_ct2`` recorded in the export
    (``SOURCE_RECORD``) equals the run's. An export without a record (another converter, an older seqmap) is
    checked by scoring a probe in float32 instead: the mean per-token log-probability difference at most 1e-3.
    Quantization never decides identity (int8 kernels round differently on each ISA); when int8 is in use, its
    drift on the probe is reported as an ``Int8DriftWarning`` above ``INT8_DRIFT_WARNING``, and never refused.
    """
    path = Path(ct2_dir)
    lm = run.src_tok is None
    vocabularies = _vocabularies(path, lm)
    target = set(vocabularies[-1])
    missing = sorted(target - set(_ids_of_pieces(run.tgt_tok)))
    if missing:
        raise HubError(f"{path} is not an export of {run.checkpoint}: {len(missing)} of its {len(target)} target "
                       f"tokens (e.g. {missing[0]!r}) are not the run's; write it again with "
                       "seqmap export ct2 RUN_DIR --out DIR")
    int8 = quantized or "int8" in model.compute_type
    record = read_source_record(path)
    if record is not None:
        if record["checkpoint_sha256"] != checkpoint_digest(run):
            raise HubError(f"{path} is not an export of {run.checkpoint}: it was written from another checkpoint "
                           f"({record.get('checkpoint', 'unnamed')}, weights sha256 "
                           f"{record['checkpoint_sha256'][:12]}...); write it again with "
                           "seqmap export ct2 RUN_DIR --out DIR")
        if int8:
            drift = probe_difference(path, model, run, vocabularies)
            if drift is not None and drift > INT8_DRIFT_WARNING:
                warnings.warn(f"int8 moves the log-probabilities of {path} by {drift:.3g} on average on a probe "
                              f"sentence (more than {INT8_DRIFT_WARNING:g}); compare its scores with the float "
                              "run's (seqmap evaluate RUN_DIR --ct2 DIR with and without --quantize int8)",
                              Int8DriftWarning, stacklevel=2)
        return
    if int8:  # identity from the float weights: the same export opened without int8 kernels
        model = _load("Generator" if lm else "Translator", path, 1, "float32")
    difference = probe_difference(path, model, run, vocabularies)
    if difference is not None and not difference <= 1e-3:
        raise HubError(f"{path} is not an export of {run.checkpoint}: on a probe sentence its log-probabilities "
                       f"differ from the run's by {difference:.3g} on average (at most 0.001 expected); "
                       "write it again with seqmap export ct2 RUN_DIR --out DIR")


def probe_difference(path: Path, model, run, vocabularies: list[list[str]]) -> float | None:
    """Mean absolute difference of per-token log-probabilities between the export and the run on a probe (the
    first ``PROBE_TOKENS`` ordinary pieces as source, the last as target; for an LM the last as its text); None
    when the vocabularies leave nothing to probe with."""
    lm = run.src_tok is None
    target = set(vocabularies[-1])
    tgt_pieces = run.tgt_tok.pieces(range(run.tgt_tok.vocab_size))
    tgt = [i for i, p in enumerate(tgt_pieces) if i not in NEVER_GENERATED and i != EOS and p in target][-PROBE_TOKENS:]
    device = next(run.model.parameters()).device
    try:
        if lm:
            src = None
            if len(tgt) < 2:
                return None
            theirs = model.score_batch([run.tgt_tok.pieces(tgt)])[0].log_probs
        else:
            source_vocab = set(vocabularies[0])
            src = [i for i, p in enumerate(run.src_tok.pieces(range(run.src_tok.vocab_size)))
                   if i not in NEVER_GENERATED and i != EOS and p in source_vocab][:PROBE_TOKENS]
            if not src or not tgt:
                return None
            theirs = model.score_batch([run.src_tok.pieces(src)], [run.tgt_tok.pieces(tgt)])[0].log_probs
    except RuntimeError as e:
        raise HubError(f"CTranslate2 could not score a probe sentence with {path}: "
                       f"{' '.join(str(e).split())[:200]}") from None
    with torch.no_grad():
        if lm:  # the export scores each token after the first
            logits = run.model(None, None, torch.tensor([tgt], device=device))[0, :-1].float()
            scored = tgt[1:]
        else:  # each target token, then EOS, after BOS
            logits = run.model(torch.tensor([src], device=device), None,
                               torch.tensor([[BOS, *tgt]], device=device))[0].float()
            scored = [*tgt, EOS]
    absent = [i for i, piece in enumerate(tgt_pieces) if piece not in target]
    if absent:  # ids the export has no token for (an imported Marian's PAD and BOS) are not in its softmax
        logits = logits.index_fill(-1, torch.tensor(absent, device=device), float("-inf"))
    ours = logits.log_softmax(-1).gather(1, torch.tensor(scored, device=device)[:, None])
    return float((torch.tensor(theirs, device=device) - ours.squeeze(1)).abs().mean())


def _suppressed(model, tok) -> list[list[str]]:
    """PAD and BOS (never generated; UNK has ``disable_unk``) as CTranslate2's ``suppress_sequences``: those the
    export has a token for (``target_tokens`` of a model ``load_translator`` or ``load_generator`` opened; an
    imported Marian's or GPT-2's export has none for some of seqmap's reserved ids)."""
    tokens = getattr(model, "target_tokens", None)  # None: a model opened by its own constructor
    pieces = tok.pieces([t for t in NEVER_GENERATED if t != UNK])
    return [[piece] for piece in pieces if tokens is None or piece in tokens]


@functools.lru_cache(maxsize=8)
def _ids_of_pieces(tok) -> dict[str, int]:
    """Token string -> id for a tokenizer (built once per tokenizer: 4 ms for 8,000 pieces, a third of a
    one-sentence call)."""
    return {piece: i for i, piece in enumerate(tok.pieces(range(tok.vocab_size)))}


def translate_ct2(translator, src_tok, tgt_tok, sources: Sequence[Sequence[int]],
                  decode: DecodeConfig) -> list[list[int]]:
    """Source ids -> output ids (no EOS), decoded by CTranslate2 as ``translate_ids`` decodes with the run
    (``translate_ct2_nbest``'s best output of each sentence, unscored)."""
    return [entries[0].output for entries in translate_ct2_nbest(translator, src_tok, tgt_tok, sources, decode)]


def translate_ct2_nbest(translator, src_tok, tgt_tok, sources: Sequence[Sequence[int]], decode: DecodeConfig, *,
                        n_best: int = 1, scores: bool = False) -> list[list[Scored]]:
    """Per source, its ``n_best`` outputs decoded by CTranslate2, as ``Scored`` entries of ``translate_nbest``.

    As seqmap: a sentence of S tokens gets at most ``max_len_a * S + max_len_b`` tokens (EOS included);
    PAD, BOS and UNK are never generated, EOS may come first (CTranslate2 bans it there by default);
    batches are cut at ``decode.max_tokens`` source tokens times beams (CTranslate2 sorts the sentences by
    length first). CTranslate2 takes one length limit per call, the longest of all; each output is then cut at its own
    sentence's limit, which is exact for greedy decoding (a row's tokens do not depend on its limit
    until it is reached). Beam search ranks finished hypotheses by CTranslate2's rule (score / length **
    ``length_penalty``, stopping when the best is finished), not seqmap's GNMT one, so beam outputs can
    differ from seqmap's on some sentences (and on those that reach their limit). An empty source gives an
    empty output (CTranslate2 does not decode it; seqmap decodes a source of one EOS).

    ``scores``: each entry's ``score`` is the sum of its tokens' log-probabilities (EOS included when it
    finished) and ``normalized`` that over ``decode.beam_ranking``'s length norm, as seqmap defines them
    (read back from CTranslate2's length-normalised score). Without ``scores`` both are None. With
    ``scores`` or a beam, a sentence that reached its own limit below the call's is decoded again under
    its own limit (a second call for those sentences only), so its score, and its beam, are its own.
    """
    if decode.no_repeat_ngram:
        raise HubError("--decode.no_repeat_ngram is not passed to CTranslate2; decode with seqmap instead")
    if n_best > decode.beam_size:
        raise HubError(f"n_best={n_best} needs decode.beam_size >= {n_best} (got {decode.beam_size})")
    if not sources:
        return []
    ids_of = _ids_of_pieces(tgt_tok)
    suppressed = _suppressed(translator, tgt_tok)
    rows = [list(s) for s in sources]
    limits = [max(1, int(decode.max_len_a * max(len(s), 1) + decode.max_len_b)) for s in rows]
    alpha = decode.length_penalty

    def call(indices: list[int], limit: int) -> list:
        try:
            return translator.translate_batch(
                [src_tok.pieces(rows[i]) for i in indices], beam_size=decode.beam_size, length_penalty=alpha,
                max_decoding_length=limit, min_decoding_length=0, disable_unk=True, suppress_sequences=suppressed,
                num_hypotheses=n_best, return_scores=scores,
                max_batch_size=max(1, decode.max_tokens // decode.beam_size), batch_type="tokens")
        except (RuntimeError, ValueError) as e:  # e.g. a position past the exported table (model.max_len rows)
            raise HubError(f"CTranslate2 could not decode these sentences: {' '.join(str(e).split())[:200]}; "
                           "shorten them (data.max_src_len, decode.max_len_a/b) or decode with seqmap") from None

    longest = max(limits)
    results = call(list(range(len(rows))), longest)
    if scores or decode.beam_size > 1:  # decode again, under its own limit, each sentence that reached it
        again: dict[int, list[int]] = {}
        for i, (result, limit) in enumerate(zip(results, limits)):
            if limit < longest and any(len(hyp) >= limit for hyp in result.hypotheses):
                again.setdefault(limit, []).append(i)
        for limit, indices in again.items():
            for i, result in zip(indices, call(indices, limit), strict=True):
                results[i] = result
    out = []
    for result, limit in zip(results, limits, strict=True):
        entries = []
        for j, hyp in enumerate(result.hypotheses):
            try:
                output = [ids_of[piece] for piece in hyp[:limit]]
            except KeyError as e:
                raise HubError(f"the export generated {e.args[0]!r}, which is not a token of the run's target "
                               "tokenizer: it is another run's export (check_export says which)") from None
            if scores:  # CTranslate2's score is the sum over (tokens, + EOS when finished) ** alpha
                length = len(hyp) + 1 if len(hyp) < limit else len(hyp)
                entries.append(_scored(output, result.scores[j] * length ** alpha, length, decode))
            else:
                entries.append(Scored(output, None, None))
        out.append(entries)
    return out


def _scored(output: list[int], score: float, length: int, decode: DecodeConfig) -> Scored:
    return Scored(output, score, score / length_norm(length, decode.length_penalty, decode.beam_ranking))


def export_positions(run) -> int | None:
    """The most tokens (prompt and output) the run's export reads: ``model.max_len`` rows of its position table,
    or None (any number) for rope and ALiBi."""
    return None if run.cfg.model.positional in ("rope", "alibi") else run.cfg.model.max_len


def generate_ct2_nbest(generator, tok, prompts: Sequence[Sequence[int]], decode: DecodeConfig, *, n_best: int = 1,
                       sample: bool = False, scores: bool = False, positions: int | None = None
                       ) -> list[list[Scored]]:
    """Per prompt (ids, at least one), its ``n_best`` continuations by the LM's CTranslate2 export, as
    ``Scored`` entries of ``generate_nbest``: at most ``decode.max_new_tokens`` tokens each, ending at EOS
    (excluded); PAD, BOS and UNK never generated. Greedy outputs are seqmap's; beam search ranks by
    CTranslate2's rule (see ``translate_ct2_nbest``); ``sample`` draws with ``decode``'s temperature,
    top-k and top-p from CTranslate2's random numbers (``ctranslate2.set_random_seed`` before the
    generator opens: the same seed gives the same text, not seqmap's text).

    ``positions``: the most tokens the export reads (``export_positions``); a prompt that could pass it
    is refused in one line (CTranslate2 does not slide a window over learned positions as seqmap does).
    ``scores``: ``score`` and ``normalized`` as seqmap defines them (over the tokens that may be generated),
    read back from CTranslate2's length-normalised score; None otherwise.
    """
    if decode.no_repeat_ngram:
        raise HubError("--decode.no_repeat_ngram is not passed to CTranslate2; decode with seqmap instead")
    beams = 1 if sample else decode.beam_size
    if n_best > beams:
        raise HubError(f"n_best={n_best} needs beam search with decode.beam_size >= {n_best} (got {beams})")
    if any(len(p) == 0 for p in prompts):
        raise HubError("every prompt needs at least one token (a language model has no BOS of its own)")
    new = decode.max_new_tokens
    longest = max((len(p) for p in prompts), default=0)
    if positions is not None and longest + new > positions:
        raise HubError(f"a prompt of {longest} tokens and --decode.max_new_tokens {new} pass the export's "
                       f"{positions} positions (model.max_len; CTranslate2 does not slide a window as seqmap "
                       f"does): give at most {max(positions - longest, 0)} new tokens, or leave out --ct2")
    if not prompts:
        return []
    ids_of = _ids_of_pieces(tok)
    eos = tok.pieces([EOS])[0]
    inputs = [tok.pieces(list(p)) for p in prompts]
    top_k = decode.top_k if 0 < decode.top_k < tok.vocab_size else 0  # 0: every token, as seqmap's k >= V
    options = {"sampling_topk": top_k, "sampling_topp": decode.top_p,
               "sampling_temperature": decode.temperature} if sample else {"sampling_topk": 1}
    results: list = [None] * len(inputs)
    # one call per prompt length: in a call CTranslate2 reads the shortest prompt's length at once and
    # returns the longer prompts' remaining tokens as part of their outputs
    for length in sorted({len(p) for p in inputs}):
        group = [i for i, p in enumerate(inputs) if len(p) == length]
        try:
            found = generator.generate_batch(
                [inputs[i] for i in group], beam_size=beams, length_penalty=decode.length_penalty, max_length=new,
                min_length=0, include_prompt_in_result=False, return_end_token=True, end_token=eos,
                disable_unk=True, num_hypotheses=n_best, return_scores=scores,
                suppress_sequences=_suppressed(generator, tok),
                max_batch_size=max(1, decode.max_tokens // beams), batch_type="tokens", **options)
        except (RuntimeError, ValueError) as e:
            raise HubError(f"CTranslate2 could not generate: {' '.join(str(e).split())[:200]}; "
                           "decode with seqmap (leave out --ct2)") from None
        for i, result in zip(group, found, strict=True):
            results[i] = result
    alpha = decode.length_penalty
    out = []
    for result in results:
        entries = []
        for j, hyp in enumerate(result.sequences):
            finished = bool(hyp) and hyp[-1] == eos
            try:
                output = [ids_of[piece] for piece in (hyp[:-1] if finished else hyp)]
            except KeyError as e:
                raise HubError(f"the export generated {e.args[0]!r}, which is not a token of the run's "
                               "tokenizer: it is another run's export (check_export says which)") from None
            if scores:  # CTranslate2's score: the sum over the tokens (EOS included when it finished) / length ** alpha
                entries.append(_scored(output, result.scores[j] * len(hyp) ** alpha, len(hyp), decode))
            else:
                entries.append(Scored(output, None, None))
        out.append(entries)
    return out
