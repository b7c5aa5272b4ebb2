"""``seqmap export ct2``: a seqmap-trained Transformer written straight into CTranslate2's specification scores
and decodes as seqmap does (several architectures, ``translate_ct2``, ``seqmap translate --ct2``); an imported
Marian and GPT-2 go through the hf export and CTranslate2's converter; what CTranslate2 cannot express is
refused in one line."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is not installed: pip install -e \".[hf]\"")
ctranslate2 = pytest.importorskip("ctranslate2", reason="the ct2 extra is not installed: pip install -e \".[ct2]\"")
pytest.importorskip("sentencepiece")

from seqmap.config import DecodeConfig  # noqa: E402
from seqmap.decoding.text import generate_nbest, lm_prompt, translate_ids, translate_nbest  # noqa: E402
from seqmap.hub import HubError, export_hf, import_hf  # noqa: E402
from seqmap.hub.ct2 import (  # noqa: E402
    SOURCE_RECORD,
    Int8DriftWarning,
    check_export,
    export_ct2,
    export_positions,
    generate_ct2_nbest,
    load_generator,
    load_translator,
    open_export,
    translate_ct2,
    translate_ct2_nbest,
)
from seqmap.runs import load_run  # noqa: E402

from .test_ct2_lm import _trained_lm  # noqa: E402
from .test_gpt2 import tiny_gpt2  # noqa: E402
from .test_marian import tiny_marian  # noqa: E402
from .test_marian_export import _trained  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("tied", [True, False])
def test_a_marian_translates_greedily_as_seqmap_does(tmp_path, capsys, tied):
    """Untied (``tie_word_embeddings: false``): CTranslate2's converter reads the exported ``lm_head``."""
    from seqmap.cli import main

    hf, _ = tiny_marian(tmp_path, seed=9, tied=tied)
    with torch.no_grad():  # OPUS-MT's pad row is zero (Marian has no pad token); CTranslate2 relies on it
        for table in (hf.model.shared, hf.model.encoder.embed_tokens, hf.model.decoder.embed_tokens):
            table.weight[hf.config.pad_token_id] = 0.0
    hf.save_pretrained(tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "run")
    assert main(["export", "ct2", str(tmp_path / "run"), "--out", str(tmp_path / "ct2")]) == 0
    assert "(MarianMTModel for CTranslate2)" in capsys.readouterr().out
    run = load_run(tmp_path / "run")
    translator = load_translator(tmp_path / "ct2", threads=1)
    check_export(tmp_path / "ct2", translator, run)  # the export has no PAD or BOS: scored without them
    for text in ["the cat sat on the mat", "a dog met a cat", "where is the log", "the dog is on the mat"]:
        ids = run.src_tok.encode(text)
        theirs = translator.translate_batch([run.src_tok.pieces(ids)], beam_size=1, max_decoding_length=30,
                                            disable_unk=True)[0].hypotheses[0]
        ours = translate_ids(run.model, [ids], DecodeConfig(max_len_a=0.0, max_len_b=30))[0]
        assert run.tgt_tok.pieces(ours) == theirs, text
        assert len(ours) < 30  # ended with EOS, so the two length limits do not matter
        assert translate_ct2(translator, run.src_tok, run.tgt_tok, [ids], DecodeConfig(max_len_a=0.0, max_len_b=30)) \
            == [ours]  # seqmap's own driver of the export


def test_a_gpt2_generates_greedily_as_seqmap_does(tmp_path):
    _, fast = tiny_gpt2(tmp_path / "hf", seed=9)
    import_hf(tmp_path / "hf", tmp_path / "run")
    run = load_run(tmp_path / "run")
    export_ct2(run, tmp_path / "ct2")
    generator = load_generator(tmp_path / "ct2", threads=1)
    for prompt in ["the cat", "a dog met", "on the mat. the"]:
        ids = lm_prompt(run.tgt_tok, prompt)
        theirs = generator.generate_batch([run.tgt_tok.pieces(ids)], max_length=10, sampling_topk=1,
                                          include_prompt_in_result=False)[0].sequences[0]
        ours = generate_nbest(run.model, [ids], DecodeConfig(max_new_tokens=10))[0][0].output
        n = min(len(theirs), len(ours))
        assert n >= 5 and run.tgt_tok.pieces(ours)[:n] == theirs[:n], prompt
    # seqmap's own driver of the export: the same outputs (seqmap's PAD and BOS have no token in it: not suppressed)
    prompts = [lm_prompt(run.tgt_tok, p) for p in ["the cat", "a dog met", "on the mat. the"]]
    decode = DecodeConfig(max_new_tokens=10)
    assert generate_ct2_nbest(generator, run.tgt_tok, prompts, decode, positions=export_positions(run)) == \
        [[entries[0]._replace(score=None, normalized=None)] for entries in generate_nbest(run.model, prompts, decode)]


def _scores(run, src: list[int], tgt: list[int]) -> torch.Tensor:
    """seqmap's log-probability of each target token (EOS appended), given the source."""
    inputs = torch.tensor([[1, *tgt]])  # BOS first
    with torch.no_grad():
        logits = run.model(torch.tensor([src]), None, inputs)
    return torch.log_softmax(logits[0], -1).gather(1, torch.tensor([*tgt, 2])[:, None]).squeeze(1)


ARCHITECTURES = {  # each a trained toy run: what the direct export must carry over
    "post-LN, split sines, silu, output bias": {},
    "pre-LN, interleaved sines, relu, RMSNorm": {"norm_position": "pre", "sinusoidal_layout": "interleaved",
                                                  "activation": "relu", "norm": "rmsnorm", "output_bias": False},
    "learned positions, gelu, separate tables, unscaled": {
        "positional": "learned", "max_len": 160, "activation": "gelu", "share_vocab": False,
        "tie_embeddings": False, "scale_embeddings": False, "norm_position": "pre", "norm_eps": 1e-6},
    "pre-LN, swiglu": {"norm_position": "pre", "activation": "swiglu"},
    "T5's options: geglu_tanh, no biases, unscaled attention, heads of their own width, rescaled output": {
        "norm_position": "pre", "norm": "rmsnorm", "activation": "geglu_tanh", "linear_bias": False,
        "scale_attention": False, "head_dim": 6, "scale_output": True, "scale_embeddings": False,
        "output_bias": False},
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_a_seqmap_trained_transformer_scores_and_decodes_as_in_seqmap(tmp_path, name):
    run = _trained(tmp_path, **ARCHITECTURES[name])
    export_ct2(run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    texts = ["a b c", "b c d", "c a b", "d d a b c", "a"]
    sources = [run.src_tok.encode(t) for t in texts]
    for src, text in zip(sources, texts):  # every weight in its place: per-token log-probabilities agree
        tgt = run.tgt_tok.encode("c b a d")
        theirs = translator.score_batch([run.src_tok.pieces(src)], [run.tgt_tok.pieces(tgt)])[0].log_probs
        torch.testing.assert_close(torch.tensor(theirs), _scores(run, src, tgt), rtol=0, atol=2e-4, msg=text)
    decode = DecodeConfig(max_len_a=1.0, max_len_b=3)
    assert translate_ct2(translator, run.src_tok, run.tgt_tok, sources, decode) == \
        translate_ids(run.model, sources, decode)
    # beam search ranks by CTranslate2's rule, so only its constraints are seqmap's: no PAD, BOS, UNK; the limits
    beam = translate_ct2(translator, run.src_tok, run.tgt_tok, sources,
                         DecodeConfig(beam_size=3, max_len_a=0.0, max_len_b=2))
    assert all(len(o) <= 2 and 4 <= min(o, default=4) for o in beam) and any(beam)


def test_greedy_outputs_stop_at_each_sentences_own_limit(tmp_path):
    run = _trained(tmp_path)
    export_ct2(run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    sources = [run.src_tok.encode(t) for t in ["a b c", "a", "d d a b c"]]
    for a, b in ((0.0, 1), (0.0, 2), (1.0, 0), (0.5, 1)):  # limits of 1 or 2 tokens cut most outputs short
        decode = DecodeConfig(max_len_a=a, max_len_b=b)
        ours = translate_ids(run.model, sources, decode)
        assert translate_ct2(translator, run.src_tok, run.tgt_tok, sources, decode) == ours, (a, b)
        assert any(len(o) == max(1, int(a * len(s) + b)) for o, s in zip(ours, sources))  # a cut happened
    assert translate_ct2(translator, run.src_tok, run.tgt_tok, [[], sources[0]], DecodeConfig()) == \
        [[], translate_ids(run.model, sources[:1], DecodeConfig())[0]]  # empty in, empty out


def test_nbest_lists_and_scores_are_as_seqmap_defines_them(tmp_path):
    run = _trained(tmp_path)
    export_ct2(run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    sources = [run.src_tok.encode(t) for t in ["a b c", "a", "d d a b c", "c a b", "b c d a"]]
    for beam, alpha, a, b in ((1, 1.0, 1.0, 3), (1, 0.6, 0.5, 1), (3, 0.0, 2.0, 5), (3, 0.0, 1.0, 1), (3, 0.0, 0.0, 2)):
        decode = DecodeConfig(beam_size=beam, length_penalty=alpha, max_len_a=a, max_len_b=b)
        n_best = min(beam, 2)
        ours = translate_nbest(run.model, sources, decode, n_best=n_best)
        theirs = translate_ct2_nbest(translator, run.src_tok, run.tgt_tok, sources, decode, n_best=n_best,
                                     scores=True)
        # alpha 0: both searches rank by the summed log-probability, so the lists agree here, also where a limit
        # cuts (CTranslate2's earlier stop can still differ: it ends when its best hypothesis has finished)
        assert [[e.output for e in entries] for entries in theirs] == \
            [[e.output for e in entries] for entries in ours], (beam, alpha, a, b)
        for mine, other in zip(ours, theirs):
            for e, f in zip(mine, other):
                assert f.score == pytest.approx(e.score, abs=2e-4) and f.normalized == pytest.approx(e.normalized,
                                                                                                     abs=2e-4)
    unscored = translate_ct2_nbest(translator, run.src_tok, run.tgt_tok, sources, DecodeConfig())
    assert all(e.score is None and e.normalized is None for entries in unscored for e in entries)
    with pytest.raises(HubError, match=r"n_best=3 needs decode.beam_size >= 3 \(got 2\)"):
        translate_ct2_nbest(translator, run.src_tok, run.tgt_tok, sources, DecodeConfig(beam_size=2), n_best=3)


def test_int8_never_decides_whether_an_export_is_the_runs(tmp_path, monkeypatch):
    """int8 kernels round differently on each ISA, so identity comes from the export's record of its checkpoint
    (or, without one, from a float32 probe); int8's drift is a warning, never a refusal."""
    import seqmap.hub.ct2.load as ct2_load

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    run = _trained(tmp_path / "a")
    other = _trained(tmp_path / "b", activation="relu")
    export_ct2(run, tmp_path / "ct2")
    weights = {name: value.clone() for name, value in run.model.state_dict().items()}
    export_ct2(run, tmp_path / "ct2-int8", quantization="int8")
    assert all(torch.equal(value, weights[name]) for name, value in run.model.state_dict().items())  # untouched
    for path in ("ct2", "ct2-int8"):
        translator = open_export(tmp_path / path, run, threads=1, int8=True)
        assert "int8" in translator.compute_type
        with pytest.raises(HubError, match="written from another checkpoint"):
            open_export(tmp_path / path, other, threads=1, int8=True)
    monkeypatch.setattr(ct2_load, "probe_difference", lambda *args: 5.0)  # however far int8 moves the scores
    with pytest.warns(Int8DriftWarning, match=r"int8 moves the log-probabilities of .* by 5 on average"):
        open_export(tmp_path / "ct2", run, threads=1, int8=True)
    monkeypatch.undo()
    (tmp_path / "ct2" / SOURCE_RECORD).unlink()  # no record: the float32 weights are probed, not int8's
    calls = []
    probe = ct2_load.probe_difference
    monkeypatch.setattr(ct2_load, "probe_difference", lambda path, model, *rest: calls.append(model.compute_type)
                        or probe(path, model, *rest))
    open_export(tmp_path / "ct2", run, threads=1, int8=True)
    assert calls == ["float32"]
    with pytest.raises(HubError, match=r"on a probe sentence .* \(at most 0.001 expected\)"):
        open_export(tmp_path / "ct2", other, threads=1, int8=True)


def test_seqmap_translate_decodes_with_an_export(tmp_path, capsys):
    from seqmap.cli import main

    run = _trained(tmp_path)
    assert main(["export", "ct2", str(tmp_path / "run"), "--out", str(tmp_path / "ct2")]) == 0
    assert "(Transformer for CTranslate2)" in capsys.readouterr().out
    texts = ["a b c", "c a b", "b c d"]
    assert main(["translate", str(tmp_path / "run"), *texts]) == 0
    ours = capsys.readouterr().out
    assert main(["translate", str(tmp_path / "run"), *texts, "--ct2", str(tmp_path / "ct2"), "--threads", "1"]) == 0
    assert capsys.readouterr().out == ours
    assert ours.splitlines() == [run.tgt_tok.decode(o) for o in translate_ids(run.model, [
        run.src_tok.encode(t) for t in texts], run.cfg.decode)]
    assert main(["translate", str(tmp_path / "run"), "a b", "--ct2", str(tmp_path / "ct2"), "--quantize", "int8"]) == 0
    assert capsys.readouterr().out.strip()  # an int8 translation comes out (its tokens may differ)
    assert main(["export", "ct2", str(tmp_path / "run"), "--out", str(tmp_path / "ct2-int8"),
                 "--quantization", "int8"]) == 0  # weights stored in int8
    assert (tmp_path / "ct2-int8" / "model.bin").stat().st_size < (tmp_path / "ct2" / "model.bin").stat().st_size
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "run"), *texts, "--ct2", str(tmp_path / "ct2-int8")]) == 0
    assert len(capsys.readouterr().out.splitlines()) == len(texts)
    nbest = ["--nbest", "2", "--decode.beam_size", "2", "--decode.length_penalty", "0"]
    assert main(["translate", str(tmp_path / "run"), *texts, *nbest]) == 0
    ours = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert main(["translate", str(tmp_path / "run"), *texts, *nbest, "--ct2", str(tmp_path / "ct2")]) == 0
    theirs = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert len(theirs) == 2 * len(texts) and [t[:2] for t in theirs] == [o[:2] for o in ours]
    assert [float(t[2]) for t in theirs] == pytest.approx([float(o[2]) for o in ours], abs=3e-4)
    ranked = ["--nbest", "3", "--decode.beam_size", "3", "--decode.length_penalty", "1.0"]  # GNMT's norm, not ct2's
    assert main(["translate", str(tmp_path / "run"), *texts, *ranked, "--ct2", str(tmp_path / "ct2")]) == 0
    printed = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    for i in range(len(texts)):
        scores = [float(score) for number, _, score in printed if number == str(i)]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)  # best first by the printed score
    assert main(["translate", str(tmp_path / "run"), "a b", "--ct2", str(tmp_path / "ct2"), "--nbest", "3",
                 "--decode.beam_size", "2"]) == 2
    assert "n_best=3 needs decode.beam_size >= 3 (got 2)" in capsys.readouterr().err
    assert main(["translate", str(tmp_path / "run"), "a b", "--ct2", str(tmp_path)]) == 2
    assert "holds no CTranslate2 model (no model.bin); write one with seqmap export ct2" in capsys.readouterr().err


def test_seqmap_evaluate_scores_an_export(tmp_path, capsys):
    from seqmap.cli import main

    run = _trained(tmp_path)
    export_ct2(run, tmp_path / "ct2")
    (tmp_path / "src.txt").write_text("a b c\nb c d\nc a b\nd d a b c\n")
    (tmp_path / "ref.txt").write_text("c b a\nd c b\nb a c\nc b a d d\n")
    files = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt")]
    assert main(["evaluate", str(tmp_path / "run"), *files, "--out", str(tmp_path / "ours.hyp")]) == 0
    ours = capsys.readouterr().out
    assert main(["evaluate", str(tmp_path / "run"), *files, "--out", str(tmp_path / "ct2.hyp"),
                 "--ct2", str(tmp_path / "ct2")]) == 0
    theirs = capsys.readouterr().out
    assert (tmp_path / "ct2.hyp").read_text() == (tmp_path / "ours.hyp").read_text()  # greedy: the same outputs
    assert ours.splitlines()[:4] == theirs.splitlines()[:4]  # BLEU, chrF, TER, reference perplexity
    nbest = ["--nbest", "2", "--decode.beam_size", "2", "--decode.length_penalty", "0"]
    assert main(["evaluate", str(tmp_path / "run"), *files, "--out", str(tmp_path / "ours.hyp"), *nbest]) == 0
    assert main(["evaluate", str(tmp_path / "run"), *files, "--out", str(tmp_path / "ct2.hyp"), *nbest,
                 "--ct2", str(tmp_path / "ct2")]) == 0
    assert "2-best lists written to" in capsys.readouterr().out
    ours, theirs = ([line.split(" ||| ") for line in (tmp_path / f"{name}.hyp.nbest").read_text().splitlines()]
                    for name in ("ours", "ct2"))
    assert len(theirs) == 8 and [t[:2] for t in theirs] == [o[:2] for o in ours]
    assert [float(t[2]) for t in theirs] == pytest.approx([float(o[2]) for o in ours], abs=3e-4)


@pytest.mark.parametrize("command, option", [
    ("translate", ["--prefix", "c"]), ("translate", ["--sample"]), ("translate", ["--align"]),
    ("evaluate", ["--baseline-run", "RUN"])])
def test_options_seqmap_decoding_alone_offers_are_refused_with_ct2(tmp_path, capsys, command, option):
    from seqmap.cli import main

    run = _trained(tmp_path)
    export_ct2(run, tmp_path / "ct2")
    (tmp_path / "src.txt").write_text("a b c\n")
    inputs = ["a b"] if command == "translate" else ["--src", str(tmp_path / "src.txt"), "--ref",
                                                      str(tmp_path / "src.txt")]
    option = [str(tmp_path / "run") if o == "RUN" else o for o in option]
    assert main([command, str(tmp_path / "run"), *inputs, "--ct2", str(tmp_path / "ct2"), *option]) == 2
    assert f"{option[0]} is not available with --ct2; leave out --ct2" in capsys.readouterr().err


def test_ct2_decodes_transformer_runs_only(tmp_path, capsys):
    from seqmap.cli import main

    _trained(tmp_path, family="rnn")
    (tmp_path / "src.txt").write_text("a b c\n")
    assert main(["evaluate", str(tmp_path / "run"), "--src", str(tmp_path / "src.txt"), "--ref",
                 str(tmp_path / "src.txt"), "--ct2", str(tmp_path)]) == 2
    assert "--ct2 decodes Transformer runs; " in capsys.readouterr().err


def test_what_ctranslate2_cannot_express_is_refused_in_one_line(tmp_path):
    run = _trained(tmp_path)
    with pytest.raises(HubError, match="--quantization 'int3' is not one of CTranslate2's"):
        export_ct2(run, tmp_path / "ct2", quantization="int3")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(HubError, match="exists and is not empty"):
        export_ct2(run, tmp_path / "full")
    (tmp_path / "learned").mkdir()
    with pytest.raises(HubError, match="no_repeat_ngram is not passed to CTranslate2"):
        translate_ct2(None, run.src_tok, run.tgt_tok, [[4]], DecodeConfig(no_repeat_ngram=2))
    learned = _trained(tmp_path / "learned", positional="learned", max_len=160)  # a table of 160 positions
    export_ct2(learned, tmp_path / "learned" / "ct2")
    long = learned.src_tok.encode(" ".join(["a b c d"] * 60))  # 240 tokens
    with pytest.raises(HubError, match=r"could not decode .* positions >= 160, .* or decode with seqmap"):
        translate_ct2(load_translator(tmp_path / "learned" / "ct2"), learned.src_tok, learned.tgt_tok, [long],
                      DecodeConfig())
    (tmp_path / "rope").mkdir()
    rope = _trained(tmp_path / "rope", positional="rope")
    with pytest.raises(HubError, match=r"model.positional='rope' \(CTranslate2's encoder-decoder .* no CTranslate2"):
        export_ct2(rope, tmp_path / "ct2")


@pytest.mark.parametrize("family", ["transformer", "lm"])
def test_relative_cp_positions_are_refused_by_every_export_in_one_line(tmp_path, family):
    """Content-position terms inside attention: CTranslate2, MarianMT and GPT-2 have none. Each export refuses
    the run in one line naming the option, and writes nothing."""
    run = (_trained(tmp_path, positional="relative_cp") if family == "transformer"
           else _trained_lm(tmp_path, positional="relative_cp"))
    theirs = "MarianMT" if family == "transformer" else "GPT-2"
    for export, out, message in [
            (export_ct2, "ct2", r"model.positional='relative_cp' \(CTranslate2's .*\); this model has no CTranslate2 "),
            (export_hf, "hf", rf"model.positional='relative_cp' \({theirs} has positional .*\); this model has no "
                              rf"{theirs} equivalent")]:
        with pytest.raises(HubError, match=message) as error:
            export(run, tmp_path / out)
        assert "\n" not in str(error.value) and not (tmp_path / out).exists()


def test_a_convs2s_run_is_refused_by_every_export_in_one_line_naming_its_family(tmp_path, capsys):
    """CTranslate2, MarianMT and GPT-2 have no convolutional encoder-decoder: each export refuses a ConvS2S run
    in one line naming model.family, and writes nothing."""
    from seqmap.cli import main
    from seqmap.models.convs2s import ConvS2S

    run = _trained(tmp_path, family="convs2s", emb_size=8, hidden_size=8)
    assert isinstance(run.model, ConvS2S)
    for export, out, message in [
            (export_ct2, "ct2", r"model.family=convs2s; CTranslate2 takes an encoder-decoder Transformer \(family "
                                r"transformer\) or a decoder-only model \(family lm\)$"),
            (export_hf, "hf", r"model.family=convs2s; seqmap exports lm \(as GPT2LMHeadModel\), transformer "
                              r"\(as MarianMTModel")]:
        with pytest.raises(HubError, match=message) as error:
            export(run, tmp_path / out)
        assert "\n" not in str(error.value) and not (tmp_path / out).exists()
    capsys.readouterr()
    assert main(["export", "ct2", str(tmp_path / "run"), "--out", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.family=convs2s; CTranslate2 takes" in err


def test_another_runs_export_is_refused_in_one_line(tmp_path, capsys):
    import json

    from seqmap.cli import main

    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    run = _trained(tmp_path / "a")
    other = _trained(tmp_path / "b", activation="relu")  # the same shapes and tokens, other weights
    export_ct2(run, tmp_path / "ct2")
    translator = load_translator(tmp_path / "ct2", threads=1)
    check_export(tmp_path / "ct2", translator, run)  # its own run: no error
    with pytest.raises(HubError, match=r"is not an export of .*: it was written from another checkpoint \(.*"
                                       r"step-\d+, weights sha256 [0-9a-f]{12}\.\.\.\)"):
        check_export(tmp_path / "ct2", translator, other)
    assert main(["translate", str(tmp_path / "b" / "run"), "a b", "--ct2", str(tmp_path / "ct2")]) == 2
    err = capsys.readouterr().err
    assert "is not an export of" in err and err.count("\n") == 1
    record = tmp_path / "ct2" / SOURCE_RECORD
    kept = record.read_text()
    record.write_text("{not json")
    with pytest.raises(HubError, match=r"seqmap_source.json is damaged .*write the export again"):
        check_export(tmp_path / "ct2", translator, run)
    record.unlink()  # an export without a record (another converter): the float probe decides
    check_export(tmp_path / "ct2", translator, run)
    with pytest.raises(HubError, match=r"is not an export of .*: on a probe sentence its log-probabilities differ "
                                       r"from the run's by [0-9.e-]+ on average \(at most 0.001 expected\)"):
        check_export(tmp_path / "ct2", translator, other)
    record.write_text(kept)
    vocabulary = tmp_path / "ct2" / "shared_vocabulary.json"
    tokens = json.loads(vocabulary.read_text())
    vocabulary.write_text(json.dumps([*tokens[:-1], "zebra"]))  # a token the run's tokenizer does not have
    with pytest.raises(HubError, match=r"1 of its \d+ target tokens \(e.g. 'zebra'\) are not the run's"):
        check_export(tmp_path / "ct2", translator, run)
    vocabulary.unlink()
    with pytest.raises(HubError, match="holds no readable CTranslate2 vocabulary"):
        check_export(tmp_path / "ct2", translator, run)
