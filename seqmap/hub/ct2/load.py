"""Opening an export with CTranslate2 on the CPU, and checking that it is the run's (not another checkpoint's)."""

from __future__ import annotations

import functools
import json
import os
import warnings
from pathlib import Path

import torch

from seqmap.data.tokenizer_base import BOS, EOS, NEVER_GENERATED
from seqmap.hub.ct2.record import checkpoint_digest, read_source_record
from seqmap.hub.source import HubError


def import_ctranslate2():
    """The ``ctranslate2`` module, or a HubError saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise HubError("CTranslate2 is not installed: pip install -e \".[ct2]\"") from None
    return ctranslate2


@functools.cache
def _opened(kind: str):
    """``ctranslate2.Translator`` or ``Generator`` that also knows the tokens it can output (``target_tokens``:
    CTranslate2 refuses to suppress a token its vocabulary lacks, as an imported model's export lacks some)."""
    base = getattr(import_ctranslate2(), kind)
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
        import_ctranslate2().set_random_seed(seed)
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
    missing = sorted(target - set(ids_of_pieces(run.tgt_tok)))
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


@functools.lru_cache(maxsize=8)
def ids_of_pieces(tok) -> dict[str, int]:
    """Token string -> id for a tokenizer, built once per tokenizer (a sizeable part of a one-sentence call)."""
    return {piece: i for i, piece in enumerate(tok.pieces(range(tok.vocab_size)))}
