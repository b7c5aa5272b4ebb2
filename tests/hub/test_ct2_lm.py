"""A seqmap-trained decoder-only LM exported to CTranslate2 (``TransformerDecoderModelSpec``) scores and
generates as seqmap does: every positional scheme CTranslate2 has, swiglu, grouped key/value heads;
``generate_ct2_nbest`` (greedy outputs and scores, n-best scores, the length limit, sampling's
constraints and seed) and ``seqmap generate --ct2``; what it cannot do is refused in one line."""

from __future__ import annotations

import io

import pytest
import torch

ctranslate2 = pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.data.tokenizer_base import NEVER_GENERATED  # noqa: E402
from seqmap.decoding.text import generate_nbest, lm_prompt  # noqa: E402
from seqmap.hub import HubError  # noqa: E402
from seqmap.hub.ct2 import (  # noqa: E402
    SOURCE_RECORD,
    check_export,
    export_ct2,
    export_positions,
    generate_ct2_nbest,
    load_generator,
    open_export,
)
from seqmap.runs import load_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")

LINES = ["the cat sat on the mat", "the dog sat on the log", "a cat and a dog met on a mat",
         "the dog met the cat", "a dog sat"]


def _trained_lm(tmp_path, tokenizer: str = "word", **model):
    """A 2-layer LM trained for 40 steps on a few lines (word level: it learns to end lines with EOS)."""
    from seqmap.config import RunConfig, from_dict
    from seqmap.training.run_trainer import train

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.txt").write_text("\n".join(LINES * 12) + "\n")
    (tmp_path / "valid.txt").write_text("\n".join(LINES) + "\n")
    cfg = from_dict(RunConfig, {
        "model": {"family": "lm", "d_model": 16, "n_heads": 2, "d_ff": 32, "dec_layers": 2, "dropout": 0.0,
                  **model},
        "data": {"task": "lm", "tokenizer": tokenizer, "train": str(tmp_path / "train.txt"),
                 "valid": str(tmp_path / "valid.txt"), "context": 16},
        "train": {"max_steps": 40, "batch_size": 8, "lr": 3e-3, "warmup": 0, "schedule": "constant",
                  "valid_every": 40}})
    train(cfg, tmp_path / "run", stream=io.StringIO())
    return load_run(tmp_path / "run")


ARCHITECTURES = {
    "learned positions, gelu, pre-LN": {"positional": "learned", "max_len": 48, "activation": "gelu"},
    "sinusoidal, post-LN, output bias, untied": {"positional": "sinusoidal", "norm_position": "post",
                                                 "output_bias": True, "tie_embeddings": False},
    "rope, swiglu, RMSNorm": {"positional": "rope", "activation": "swiglu", "norm": "rmsnorm"},
    "ALiBi, 4 heads": {"positional": "alibi", "n_heads": 4},
    "rope (base 500), grouped key/value heads": {"positional": "rope", "rope_base": 500.0, "n_heads": 4,
                                                  "n_kv_heads": 2},
    "no positions, gelu_tanh, unscaled": {"positional": "none", "activation": "gelu_tanh",
                                          "scale_embeddings": False},
}
PROMPTS = ["the cat", "a dog", "the", "the dog sat on"]


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_an_exported_lm_scores_and_generates_as_in_seqmap(tmp_path, name):
    run = _trained_lm(tmp_path, **ARCHITECTURES[name])
    export_ct2(run, tmp_path / "ct2")
    generator = load_generator(tmp_path / "ct2", threads=1)
    check_export(tmp_path / "ct2", generator, run)
    tok = run.tgt_tok
    ids = lm_prompt(tok, "the cat sat on the log a dog met")
    theirs = torch.tensor(generator.score_batch([tok.pieces(ids)])[0].log_probs)
    with torch.no_grad():
        log_probs = run.model(None, None, torch.tensor([ids]))[0, :-1].log_softmax(-1)
    torch.testing.assert_close(theirs, log_probs.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1),
                               rtol=0, atol=2e-4)
    prompts = [lm_prompt(tok, p) for p in PROMPTS]  # four lengths: one CTranslate2 call each
    for new in (1, 3, 12):  # cut short, and long enough to end at EOS
        decode = DecodeConfig(max_new_tokens=new)
        ours = generate_nbest(run.model, prompts, decode)
        got = generate_ct2_nbest(generator, tok, prompts, decode, scores=True, positions=export_positions(run))
        assert [e[0].output for e in got] == [e[0].output for e in ours], new
        for a, b in zip(got, ours):
            assert a[0].score == pytest.approx(b[0].score, abs=2e-4)
            assert a[0].normalized == pytest.approx(b[0].normalized, abs=2e-4)
    ended = generate_nbest(run.model, prompts, DecodeConfig(max_new_tokens=12))
    assert any(len(e[0].output) < 11 for e in ended)  # some output ended at EOS, before the limit


def test_beam_nbest_scores_are_seqmaps_and_samples_keep_the_constraints(tmp_path):
    run = _trained_lm(tmp_path, positional="rope")
    export_ct2(run, tmp_path / "ct2")
    generator = load_generator(tmp_path / "ct2", threads=1)
    tok = run.tgt_tok
    prompts = [lm_prompt(tok, p) for p in PROMPTS]
    for alpha in (1.0, 0.6):
        decode = DecodeConfig(beam_size=4, max_new_tokens=6, length_penalty=alpha)
        ours = generate_nbest(run.model, prompts, decode, n_best=3)
        got = generate_ct2_nbest(generator, tok, prompts, decode, n_best=3, scores=True)
        assert all(len(entries) == 3 for entries in got)
        shared = 0
        for a, b in zip(got, ours):
            scores = {tuple(e.output): (e.score, e.normalized) for e in b}
            for entry in a:  # an output both found has one score, as seqmap defines it
                if tuple(entry.output) in scores:
                    shared += 1
                    assert (entry.score, entry.normalized) == pytest.approx(scores[tuple(entry.output)], abs=2e-4)
        assert shared >= 6
    # nearly uniform: would draw PAD, BOS, UNK if allowed; a top-k past the vocabulary keeps every token
    hot = DecodeConfig(max_new_tokens=10, temperature=5.0, top_k=10 * tok.vocab_size)
    samples = generate_ct2_nbest(generator, tok, prompts * 8, hot, sample=True)
    drawn = {t for entries in samples for t in entries[0].output}
    assert not drawn & set(NEVER_GENERATED) and len(drawn) > 8
    top1 = generate_ct2_nbest(generator, tok, prompts, DecodeConfig(max_new_tokens=8, top_k=1), sample=True)
    assert top1 == generate_ct2_nbest(generator, tok, prompts, DecodeConfig(max_new_tokens=8))  # top-1 = greedy


def test_generate_ct2_on_the_command_line(tmp_path, capsys):
    from seqmap.cli import main

    _trained_lm(tmp_path, positional="learned", max_len=16)
    run_dir, ct2 = str(tmp_path / "run"), str(tmp_path / "ct2")
    assert main(["export", "ct2", run_dir, "--out", ct2]) == 0
    assert "(decoder-only Transformer for CTranslate2)" in capsys.readouterr().out
    args = ["generate", run_dir, "--prompt", "the cat", "--decode.max_new_tokens", "8"]
    assert main([*args, "--greedy"]) == 0
    ours = capsys.readouterr().out
    assert main([*args, "--greedy", "--ct2", ct2]) == 0
    assert capsys.readouterr().out == ours
    texts = []
    for seed in (3, 3, 4):  # a seed gives the same text each time
        assert main([*args, "--ct2", ct2, "--seed", str(seed), "--decode.temperature", "3"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].startswith("the cat")
    assert main([*args, "--ct2", ct2, "--greedy", "--quantize", "int8"]) == 0  # int8 export, checked at 0.1
    assert capsys.readouterr().out.startswith("the cat")
    # a prompt of 3 tokens (EOS, "the", "cat") and 14 new pass the 16 learned positions: one line, with the fix
    assert main([*args[:-1], "14", "--ct2", ct2, "--greedy"]) == 2
    err = capsys.readouterr().err
    assert "pass the export's 16 positions" in err and "at most 13 new tokens" in err and err.count("\n") == 1


def test_what_an_lm_export_cannot_do_is_refused_in_one_line(tmp_path, capsys):
    from seqmap.cli import main

    run = _trained_lm(tmp_path / "a", positional="rope")
    other = _trained_lm(tmp_path / "b", positional="rope", activation="gelu")  # same shapes, other weights
    export_ct2(run, tmp_path / "ct2")
    with pytest.raises(HubError, match=r"is not an export of .*: it was written from another checkpoint"):
        open_export(tmp_path / "ct2", other)
    with pytest.raises(HubError, match=r"is not an export of .*: it was written from another checkpoint"):
        open_export(tmp_path / "ct2", other, int8=True)
    open_export(tmp_path / "ct2", run, int8=True)  # int8's rounding, whatever the ISA, is not another run's
    (tmp_path / "ct2" / SOURCE_RECORD).unlink()  # without the record, a float32 probe tells them apart
    with pytest.raises(HubError, match=r"is not an export of .*: on a probe sentence"):
        open_export(tmp_path / "ct2", other, int8=True)
    open_export(tmp_path / "ct2", run, int8=True)
    generator = open_export(tmp_path / "ct2", run, threads=1)
    tok = run.tgt_tok
    with pytest.raises(HubError, match="no_repeat_ngram is not passed to CTranslate2"):
        generate_ct2_nbest(generator, tok, [[4]], DecodeConfig(no_repeat_ngram=2))
    with pytest.raises(HubError, match="n_best=2 needs beam search"):
        generate_ct2_nbest(generator, tok, [[4]], DecodeConfig(), n_best=2)
    with pytest.raises(HubError, match="every prompt needs at least one token"):
        generate_ct2_nbest(generator, tok, [[]], DecodeConfig())
    relative = _trained_lm(tmp_path / "c", positional="relative")
    with pytest.raises(HubError, match=r"model.positional='relative' \(CTranslate2's decoder-only model takes "):
        export_ct2(relative, tmp_path / "c" / "ct2")
    _trained_lm(tmp_path / "d", family="rnn_lm")
    args = ["generate", str(tmp_path / "b" / "run"), "--prompt", "the", "--greedy", "--ct2"]
    assert main([*args, str(tmp_path / "ct2")]) == 2  # another run's export
    assert main([*args, str(tmp_path / "nothing")]) == 2  # no model there
    assert main(["generate", str(tmp_path / "d" / "run"), "--prompt", "the", "--ct2", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert "is not an export of" in err[0] and "holds no CTranslate2 model" in err[1] and len(err) == 3
    assert "--ct2 generates with decoder-only Transformer LMs" in err[2] and "model.family=rnn_lm" in err[2]
