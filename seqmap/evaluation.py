"""Evaluate a trained run on a test set: decode, score with sacreBLEU, and measure reference perplexity.

BLEU, chrF and TER come from sacreBLEU with their signatures (BLEU's tokenizer
chosen by the target language: ``zh`` for Chinese, ``13a`` otherwise), so a
score can be reproduced by anyone. Perplexity is exp(summed NLL of the
references / their tokens), from teacher forcing.
"""

from __future__ import annotations

from pathlib import Path

from seqmap import metrics as mt
from seqmap.config import DecodeConfig
from seqmap.data.corpus import read_parallel
from seqmap.decoding.text import translate_texts
from seqmap.runs import LoadedRun
from seqmap.training.validate import summed_nll, translation_batches


def score(hyps: list[str], refs: list[str], tgt_lang: str) -> dict:
    """BLEU, chrF and TER of hypotheses against references, with sacreBLEU signatures."""
    bleu = mt.bleu(hyps, refs, tokenize=mt.tokenizer_for(tgt_lang))
    chrf, ter = mt.chrf(hyps, refs), mt.ter(hyps, refs)
    return {"bleu": bleu.value, "chrf": chrf.value, "ter": ter.value, "bleu_signature": bleu.signature,
            "chrf_signature": chrf.signature, "ter_signature": ter.signature}


def reference_perplexity(run: LoadedRun, sources: list[str], refs: list[str], max_tokens: int) -> float:
    pairs = [(run.src_tok.encode(s), run.tgt_tok.encode(r)) for s, r in zip(sources, refs)]
    nll, n = summed_nll(run.model, translation_batches(pairs, max_tokens), run.device)
    return mt.perplexity(nll, n)


def evaluate_pairs(run: LoadedRun, sources: list[str], refs: list[str], decode: DecodeConfig | None = None,
                   out: Path | None = None) -> dict:
    """Translate ``sources``, write the hypotheses to ``out`` (one per line), and score them."""
    decode = decode or run.cfg.decode
    hyps = translate_texts(run.model, run.src_tok, run.tgt_tok, sources, max_tokens=decode.max_tokens,
                           max_len_a=decode.max_len_a, max_len_b=decode.max_len_b, device=run.device)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    result = score(hyps, refs, run.cfg.data.tgt_lang)
    result["ppl"] = reference_perplexity(run, sources, refs, decode.max_tokens)
    result["sentences"] = len(hyps)
    return result


def evaluate_files(run: LoadedRun, src: str | Path, ref: str | Path, decode: DecodeConfig | None = None,
                   out: Path | None = None) -> dict:
    pairs = read_parallel(src, ref, "--src", "--ref")
    return evaluate_pairs(run, [s for s, _ in pairs], [r for _, r in pairs], decode, out)
