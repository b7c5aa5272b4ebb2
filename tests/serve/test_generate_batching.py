"""/generate batches prompts of unequal length, and each request still gets exactly its text alone.

Every language model the project has: the decoder-only LM under each positional
scheme (learned positions past their window included) and the RNN LM, greedy and
seeded sampling. The reference is the request decoded by itself through the plain
(1, P) prompt path of ``decode_loop``.
"""

import dataclasses

import pytest
import torch

from seqmap.data.tokenizers import BOS, EOS, NEVER_GENERATED, PAD
from seqmap.decoding.greedy import decode_loop, pick_best
from seqmap.decoding.sampling import RowSampler
from seqmap.decoding.text import strip_output
from seqmap.models.builder import build_model
from seqmap.nn.positional import POSITIONAL_KINDS
from seqmap.runs import LoadedRun
from seqmap.serve.engine import Engine, GenerateJob
from seqmap.serve.schemas import GenerateRequest

from .test_batching import serve

# all of different lengths (1 to 20 characters); with 24 new tokens the longer ones pass the 32 learned positions
PROMPTS = ["to be", "t", "or not to be, that i", "that is", "the question", "be, or n", "q,", "not to be, th"]
MAX_NEW = 24

MODELS = {
    **{f"lm-{p}": dict(family="lm", positional=p) for p in POSITIONAL_KINDS},
    "lm-relative-values": dict(family="lm", positional="relative", relative_values=True, relative_clip=4),
    **{f"rnn_lm-{cell}": dict(family="rnn_lm", rnn_cell=cell, emb_size=16, hidden_size=24)
       for cell in ("lstm", "gru")},
}


@pytest.fixture(scope="module", params=list(MODELS))
def model_run(request, lm_run) -> LoadedRun:
    """The trained character LM's run with a freshly initialised model of another kind (its tokenizer kept)."""
    model_cfg = dataclasses.replace(lm_run.cfg.model, max_len=32, **MODELS[request.param])
    torch.manual_seed(0)
    model = build_model(model_cfg).to(lm_run.device).eval()
    if model_cfg.family == "rnn_lm":  # its small initial weights (+-0.1) would make every first choice EOS
        with torch.no_grad():
            for p in model.parameters():
                p.uniform_(-1.0, 1.0)
    return dataclasses.replace(lm_run, cfg=dataclasses.replace(lm_run.cfg, model=model_cfg), model=model)


def generate_alone(run: LoadedRun, job: GenerateJob, sample: bool, engine: Engine) -> dict:
    """One request by itself, through the (1, P) tensor prompt of ``decode_loop``."""
    key = engine.generate_key(request(job.prompt, sample, job.seed), job.ids)
    max_new = key.max_new
    choose = pick_best
    if sample:
        choose = RowSampler(key.temperature, key.top_k, key.top_p, [torch.Generator().manual_seed(job.seed)])
    prompt = torch.tensor([job.ids], dtype=torch.long, device=run.device)
    result = decode_loop(run.model, None, None, bos=BOS, eos=EOS, max_len=max_new, pad=PAD, prompt=prompt,
                         choose=choose, banned=NEVER_GENERATED)
    ids = strip_output(result.tokens[0, : int(result.lengths[0])].tolist())
    return {"text": run.tgt_tok.decode(ids), "tokens": len(ids), "finished": len(ids) < int(result.lengths[0])}


def request(prompt: str, sample: bool, seed: int) -> GenerateRequest:
    return GenerateRequest(prompt=prompt, max_new_tokens=MAX_NEW, sample=sample, seed=seed, temperature=1.0,
                           top_k=0, top_p=1.0)


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampling"])
def test_prompts_of_unequal_length_share_one_batch_and_each_gets_its_text_alone(model_run, sample):
    engine = Engine(model_run)
    jobs = [GenerateJob(p, engine.prompt_ids(p), seed, False) for seed, p in enumerate(PROMPTS)]
    assert len({len(job.ids) for job in jobs}) == len(jobs)  # every prompt length differs
    keys = {engine.generate_key(request(job.prompt, sample, job.seed), job.ids) for job in jobs}
    assert len(keys) == 1  # the prompt length is not part of the batch key
    together = engine.run_generate(keys.pop(), jobs)
    for job, got in zip(jobs, together):
        want = generate_alone(model_run, job, sample, engine)
        assert (got["text"], got["tokens"], got["finished"]) == (want["text"], want["tokens"], want["finished"])
    assert max(r["tokens"] for r in together) > 12  # rows really decoded for a while (past 32 positions for some)
    if sample:
        assert len({r["text"] for r in together}) > 1


def test_concurrent_requests_of_unequal_length_are_decoded_in_one_batch(lm_run):
    """Through the app: before, each prompt length was its own batch; now they share one."""
    bodies = [{"prompt": p, "max_new_tokens": 16, "seed": i} for i, p in enumerate(PROMPTS)]
    batched, health = serve(lm_run, bodies, path="/generate", max_batch=32, wait_ms=300)
    alone, alone_health = serve(lm_run, bodies, path="/generate", max_batch=1, wait_ms=0)
    stats = health["batching"]
    assert stats["max_batch_requests"] > 1  # prompts of different lengths were decoded together
    assert stats["batches"] < len(bodies) and stats["failed_batches"] == 0
    assert alone_health["batching"]["max_batch_requests"] == 1
    assert [(r["text"], r["tokens"], r["finished"]) for r in batched] == [
        (r["text"], r["tokens"], r["finished"]) for r in alone]

