"""The model side of the server: batches of requests in, JSON-ready results out. No HTTP here.

``Engine`` wraps a loaded run (``seqmap.runs.load_run``) and offers what the
batcher calls from its worker thread:

    engine.translate_key(req)          -> the batch key: options a batch must share
    engine.run_translate(key, jobs)    -> per job, its list of translation dicts
    engine.generate_key(req, ids)      -> likewise for a language model (a ``GenerateKey``)
    engine.run_generate(key, jobs)

Translation decodes every sentence of a batch in one ``translate_nbest`` call (which
sorts by length and cuts the batch under the run's token budget), so a batch gives
the same outputs as one request at a time, up to float rounding. With ``seqmap serve
--ct2 DIR`` the run's CTranslate2 export does that search instead
(``seqmap.hub.ct2.translate_ct2_nbest``: greedy outputs and every score as seqmap's);
attention still comes from the run's own model. An LM's export does the greedy
searches of /generate (``seqmap.hub.ct2.generate_ct2_nbest``, seqmap's outputs); sampled
requests stay with seqmap's per-row seeded sampling below, which CTranslate2's one
seed per generator cannot give. Attention, when
asked for, comes from forced decoding of the best translation
(``seqmap.decoding.align.forced_attention``), exactly as ``seqmap plot attention``
draws it; it is not part of the batch key.

Generation batches prompts of any lengths: each prompt is read alone, then the
model's states are stacked (``seqmap.decoding.greedy.prefill_each``; a shorter
row's caches are padded on the left and masked, an RNN's hidden states simply
stacked), and the new tokens are decoded together. Each row is sampled with its
own seeded generator, so a request's text depends on its prompt and seed only,
never on which requests shared its batch, and equals ``seqmap generate --seed N``
for the same prompt (up to float rounding, as for translation).
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor

from seqmap.config import DecodeConfig, to_dict
from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD
from seqmap.decoding.align import forced_attention
from seqmap.decoding.greedy import decode_loop, pick_best
from seqmap.decoding.sampling import RowSampler
from seqmap.decoding.text import (
    continuation,
    lm_prompt,
    resolve_config,
    skip_empty,
    source_ids,
    strip_output,
    translate_nbest,
)
from seqmap.hub.ct2 import export_positions, generate_ct2_nbest, translate_ct2_nbest
from seqmap.runs import LoadedRun
from seqmap.serve.schemas import GenerateRequest, Limits, RequestError, TranslateRequest
from seqmap.tasks.registry import TASKS

DECIMALS = 4  # attention weights are rounded for the JSON (a 1e-4 difference is invisible in a heatmap)


@dataclass(frozen=True)
class TranslateJob:
    texts: list[str]
    attention: bool


@dataclass(frozen=True)
class GenerateJob:
    prompt: str
    ids: list[int]
    seed: int
    attention: bool


class GenerateKey(NamedTuple):
    """Options every request of a /generate batch shares; the prompt length is not one of them."""

    kind: str  # "generate": batches are dispatched on key[0]
    max_new: int
    sample: bool
    temperature: float | None  # None when greedy (sampling options do not split greedy batches)
    top_k: int | None
    top_p: float | None


def attention_payload(weights: Tensor, source_tokens: list[str], output_tokens: list[str]) -> dict[str, Any]:
    """(L, H, T, S) weights and their labels as the ``Attention`` schema's dict."""
    assert weights.shape[-2:] == (len(output_tokens), len(source_tokens)), (tuple(weights.shape),
                                                                            len(output_tokens), len(source_tokens))
    return {"source_tokens": source_tokens, "output_tokens": output_tokens, "layers": weights.size(0),
            "heads": weights.size(1), "weights": weights.double().round(decimals=DECIMALS).tolist()}


class Engine:
    """A loaded run and the decode work of the server (called from the batcher's worker thread only)."""

    def __init__(self, run: LoadedRun, limits: Limits | None = None, ct2=None, decoder: str = "seqmap") -> None:
        """``ct2``: the run's CTranslate2 export (``seqmap serve --ct2``): a ``ctranslate2.Translator``, which then
        does the searches of /translate, or an LM's ``ctranslate2.Generator``, which does the greedy searches
        of /generate; ``decoder`` names what searches, for /info."""
        self.run = run
        self.limits = limits or Limits()
        self.task = "lm" if run.src_tok is None else "translation"
        self.decode: DecodeConfig = run.cfg.decode
        self.ct2, self.decoder = ct2, decoder
        self.attention_shape = self._attention_shape()
        self.has_attention = self.attention_shape["available"]

    def attention_bound(self, source_lengths: list[int], output_lengths: list[int]) -> int:
        """Most attention weights an answer can carry: per text layers x heads x (outputs + 1) x keys."""
        shape = self.attention_shape
        return sum(shape["layers"] * shape["heads"] * (out + 1) * max(src, 1)
                   for src, out in zip(source_lengths, output_lengths))

    def check_attention_size(self, texts: list[str]) -> None:
        """Refuse (422, field ``attention``) a /translate request whose attention could pass the limit."""
        d = self.decode
        sources = self._source_lengths(texts)
        bound = self.attention_bound(sources, [int(d.max_len_a * s + d.max_len_b) for s in sources])
        self._refuse_over(bound, "send fewer or shorter texts, or attention=false")

    def check_generate_attention_size(self, prompt_len: int, max_new: int) -> None:
        total = prompt_len + max_new
        self._refuse_over(self.attention_bound([total], [total]), "lower max_new_tokens, or send attention=false")

    def check_positions(self, texts: list[str]) -> None:
        """With a CTranslate2 export, refuse (422, field ``text``) a text whose translation could pass the
        export's position table (``model.max_len`` rows): CTranslate2 would fail the whole batch."""
        if self.ct2 is None:
            return
        d, rows = self.decode, self.run.cfg.model.max_len
        for i, source in enumerate(self._source_lengths(texts)):
            longest = max(source, int(d.max_len_a * source + d.max_len_b))
            if longest > rows:
                raise RequestError(f"text {i} could need {longest} positions; this server's CTranslate2 export has "
                                   f"{rows} (model.max_len): send a shorter text", "text")

    def check_generate_positions(self, prompt_len: int, key: GenerateKey) -> None:
        """With an LM's CTranslate2 export, refuse (422, field ``max_new_tokens``) a greedy request whose prompt
        and new tokens could pass the export's position table (seqmap's own decoding slides a window)."""
        rows = None if self.ct2 is None or key.sample else export_positions(self.run)
        if rows is not None and prompt_len + key.max_new > rows:
            raise RequestError(f"a prompt of {prompt_len} tokens and {key.max_new} new tokens pass this server's "
                               f"CTranslate2 export's {rows} positions (model.max_len): ask for at most "
                               f"{max(rows - prompt_len, 0)} new tokens, or a shorter prompt", "max_new_tokens")

    def _source_lengths(self, texts: list[str]) -> list[int]:
        """Source tokens each text is read as (truncated as decoding truncates it; an empty text reads one EOS)."""
        return [max(len(ids), 1) for ids in source_ids(self.run.src_tok, texts, self.run.cfg.data.max_src_len)]

    def _refuse_over(self, bound: int, fix: str) -> None:
        if bound > self.limits.max_attention_weights:
            raise RequestError(f"attention for this request could hold up to {bound:,} weights; this server "
                               f"sends at most {self.limits.max_attention_weights:,} per answer: {fix}", "attention")

    # -- translation -----------------------------------------------------------------------------

    def translate_key(self, req: TranslateRequest) -> Hashable:
        """Options that every request of a batch must share: beam size, n-best, length penalty."""
        beam = req.beam_size or self.decode.beam_size
        penalty = self.decode.length_penalty if req.length_penalty is None else req.length_penalty
        return ("translate", beam, req.n_best, float(penalty))

    def run_translate(self, key: Hashable, jobs: list[TranslateJob]) -> list[list[dict[str, Any]]]:
        """Translate the sentences of every job in one call; per job, one dict per sentence."""
        _, beam, n_best, penalty = key
        run = self.run
        decode = resolve_config(self.decode, {"beam_size": beam, "length_penalty": penalty})
        texts = [t for job in jobs for t in job.texts]
        sources = source_ids(run.src_tok, texts, run.cfg.data.max_src_len)  # a blank text translates as empty
        if self.ct2 is None:
            nbest = translate_nbest(run.model, sources, decode, n_best=n_best, device=run.device)
        else:
            nbest = skip_empty(sources, lambda rows: translate_ct2_nbest(self.ct2, run.src_tok, run.tgt_tok, rows,
                                                                         decode, n_best=n_best, scores=True))
        out, i = [], 0
        for job in jobs:
            results = []
            for text in job.texts:
                entries, src_ids = nbest[i], sources[i]
                i += 1
                best = entries[0].output
                results.append({
                    "source": text,
                    "translation": run.tgt_tok.decode(best),
                    "nbest": [{"text": run.tgt_tok.decode(e.output), "score": e.score, "normalized": e.normalized}
                              for e in entries],
                    "attention": self.cross_attention(text, src_ids, best) if job.attention and src_ids else None,
                })
            out.append(results)
        return out

    @torch.no_grad()
    def cross_attention(self, text: str, src_ids: list[int], hyp_ids: list[int]) -> dict[str, Any]:
        """What each output token (and the final EOS step) attended to in the source: the page's heatmap."""
        run = self.run
        weights = forced_attention(run.model, src_ids, hyp_ids, device=run.device)  # (L, H, n + 1, S)
        source_tokens = run.src_tok.tokens(text) or run.src_tok.pieces([EOS])  # an empty source reads one EOS
        output_tokens = [*run.tgt_tok.pieces(hyp_ids), *run.tgt_tok.pieces([EOS])]
        return attention_payload(weights, source_tokens, output_tokens)

    # -- generation ------------------------------------------------------------------------------

    def prompt_ids(self, prompt: str) -> list[int]:
        return lm_prompt(self.run.tgt_tok, prompt)

    def generate_key(self, req: GenerateRequest, ids: list[int]) -> GenerateKey:
        """Options shared by a batch: new tokens and sampling options. Prompts of any length share a batch."""
        d = self.decode
        max_new = req.max_new_tokens or min(d.max_new_tokens, self.limits.max_new_tokens)
        if not req.sample:
            return GenerateKey("generate", max_new, False, None, None, None)
        temperature = d.temperature if req.temperature is None else req.temperature
        top_k = d.top_k if req.top_k is None else req.top_k
        top_p = d.top_p if req.top_p is None else req.top_p
        return GenerateKey("generate", max_new, True, float(temperature), int(top_k), float(top_p))

    @torch.no_grad()
    def run_generate(self, key: GenerateKey, jobs: list[GenerateJob]) -> list[dict[str, Any]]:
        """Continue every job's prompt in one decode: each prompt is read alone, then the rows decode together."""
        key = GenerateKey(*key)
        run = self.run
        if self.ct2 is not None and not key.sample:  # the export searches: seqmap's greedy outputs
            decode = resolve_config(self.decode, {"max_new_tokens": key.max_new, "beam_size": 1})
            nbest = generate_ct2_nbest(self.ct2, run.tgt_tok, [job.ids for job in jobs], decode)
            outputs = [(entries[0].output, len(entries[0].output) < key.max_new) for entries in nbest]
        else:
            outputs = self._generate(key, jobs)
        return [{"prompt": job.prompt, "text": continuation(run.tgt_tok, job.ids, ids), "tokens": len(ids),
                 "finished": finished,
                 "attention": self.self_attention(job.ids, ids, finished) if job.attention else None}
                for job, (ids, finished) in zip(jobs, outputs, strict=True)]

    def _generate(self, key: GenerateKey, jobs: list[GenerateJob]) -> list[tuple[list[int], bool]]:
        """seqmap's decoding of a /generate batch: per job, (output ids, whether it ended with EOS)."""
        run = self.run
        prompts = [torch.tensor(job.ids, dtype=torch.long, device=run.device) for job in jobs]  # B x (P_b,)
        if key.sample:
            generators = [torch.Generator(device=run.device).manual_seed(job.seed) for job in jobs]
            choose = RowSampler(key.temperature, key.top_k, key.top_p, generators)
        else:
            choose = pick_best
        result = decode_loop(run.model, None, None, bos=BOS, eos=EOS, max_len=key.max_new, pad=PAD,
                             prompt=prompts, choose=choose, banned=NEVER_GENERATED,
                             no_repeat_ngram=self.decode.no_repeat_ngram)
        out = []
        for b in range(len(jobs)):
            ids = strip_output(result.tokens[b, : int(result.lengths[b])].tolist())
            out.append((ids, len(ids) < int(result.lengths[b])))  # shorter: the row ended with EOS
        return out

    @torch.no_grad()
    def self_attention(self, prompt_ids: list[int], out_ids: list[int], finished: bool) -> dict[str, Any]:
        """Per generated token (and the EOS step, if the text ended), its attention over every token before it.

        The whole sequence is fed once (forced decoding); row r of that pass is the
        query at position r, which chose token r + 1, so generated token j was
        chosen by row P - 1 + j.
        """
        run = self.run
        full = [*prompt_ids, *out_ids]
        weights = forced_attention(run.model, None, full[1:], bos=full[0], device=run.device)  # (L, H, N, N)
        rows = len(out_ids) + int(finished)
        start = len(prompt_ids) - 1
        weights = weights[:, :, start: start + rows]
        outputs = run.tgt_tok.pieces(out_ids) + (run.tgt_tok.pieces([EOS]) if finished else [])
        return attention_payload(weights, run.tgt_tok.pieces(full), outputs)

    # -- description -------------------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        """What /info shows: the model, its vocabularies, how it was trained, decode defaults, limits."""
        run, cfg = self.run, self.run.cfg
        m = cfg.model
        if m.family == "rnn":
            sizes = {"rnn_cell": m.rnn_cell, "emb_size": m.emb_size, "hidden_size": m.hidden_size,
                     "enc_layers": m.enc_layers, "dec_layers": m.dec_layers, "bidirectional": m.bidirectional,
                     "rnn_attention": m.rnn_attention}
        elif m.family == "convs2s":
            sizes = {"emb_size": m.emb_size, "hidden_size": m.hidden_size, "kernel_size": m.kernel_size,
                     "enc_layers": m.enc_layers, "dec_layers": m.dec_layers, "positional": m.positional}
        elif m.family == "rnn_lm":
            sizes = {"rnn_cell": m.rnn_cell, "emb_size": m.emb_size, "hidden_size": m.hidden_size,
                     "dec_layers": m.dec_layers}
        else:
            sizes = {"d_model": m.d_model, "n_heads": m.n_heads, "n_kv_heads": m.n_kv_heads or m.n_heads,
                     "d_ff": m.d_ff, "enc_layers": m.enc_layers if m.family == "transformer" else 0,
                     "dec_layers": m.dec_layers, "positional": m.positional, "norm_position": m.norm_position}
        d, t = cfg.data, cfg.train
        return {
            **run_header(run, self.task),
            "decoder": self.decoder,
            "sizes": sizes,
            "attention": self.attention_shape,
            "vocabulary": {"tokenizer": run.tgt_tok.kind,
                           "source": None if run.src_tok is None else run.src_tok.vocab_size,
                           "target": run.tgt_tok.vocab_size,
                           "joint": run.src_tok is run.tgt_tok or (run.src_tok is not None and d.joint_vocab)},
            "languages": {"source": d.src_lang, "target": d.tgt_lang},
            "training": {"dataset": d.dataset, "tokenizer": d.tokenizer, "vocab_size": d.vocab_size,
                         "max_steps": t.max_steps, "max_time_minutes": t.max_time, "max_tokens": t.max_tokens,
                         "lr": t.lr, "schedule": t.schedule, "warmup": t.warmup,
                         "label_smoothing": t.label_smoothing, "dropout": m.dropout},
            "decode_defaults": to_dict(self.decode),
            "model_config": to_dict(m),
        }

    @torch.no_grad()
    def _attention_shape(self) -> dict[str, Any]:
        """Layers and heads of the attention the page shows, probed by forced decoding of one token
        (an RNN with rnn_attention=none returns none: not available, 0 layers and heads)."""
        src = None if self.run.src_tok is None else [EOS]
        weights = forced_attention(self.run.model, src, [EOS], device=self.run.device)
        if weights is None:
            return {"available": False, "layers": 0, "heads": 0}
        return {"available": True, "layers": weights.size(0), "heads": weights.size(1)}


def run_header(run: LoadedRun, task: str) -> dict[str, Any]:
    """What /info says first about any run: its task, the route that serves it and what that reads, family,
    checkpoint, step and parameter count."""
    info = TASKS[task]
    return {"task": task, "endpoint": info.endpoint, "reads": info.input, "family": run.cfg.model.family,
            "checkpoint": str(run.checkpoint),
            "step": checkpoint_step(run.checkpoint), "parameters": sum(p.numel() for p in run.model.parameters())}


def checkpoint_step(checkpoint) -> int | None:
    """The optimiser step a checkpoint was saved at (from its trainer.json), if it says."""
    try:
        state = json.loads((checkpoint / "trainer.json").read_text())
    except (OSError, ValueError):
        return None
    trainer = state.get("trainer_state") if isinstance(state, dict) else None
    step = trainer.get("step") if isinstance(trainer, dict) else None
    return step if isinstance(step, int) else None
