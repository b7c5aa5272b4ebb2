"""Evaluation: decoding with the run's config, n-best files, BLEU tokenizer choice, paired bootstrap comparison."""

import re
from pathlib import Path

import pytest
import torch

from seqmap import metrics as mt
from seqmap.config import DecodeConfig, ModelConfig, RunConfig
from seqmap.data.tokenizers import train_tokenizer
from seqmap.decoding.text import translate_texts
from seqmap.evaluation import compare, evaluate_files, evaluate_pairs, score
from seqmap.models.builder import build_model
from seqmap.runs import LoadedRun

TOK = train_tokenizer("word", ["a b c d e f g h"])
SOURCES = ["a b c", "d e", "f g h a", "b", "c c d"]
REFS = ["a b c d", "d e f g", "f g h a b", "b b c d", "c d e f"]


def make_run(beam_size=3, tgt_lang="en") -> LoadedRun:
    torch.manual_seed(0)
    cfg = RunConfig()
    cfg.model = ModelConfig(family="transformer", src_vocab=TOK.vocab_size, tgt_vocab=TOK.vocab_size, d_model=16,
                            n_heads=2, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0)
    cfg.decode = DecodeConfig(beam_size=beam_size, length_penalty=1.0, max_len_b=4)
    cfg.data.tgt_lang = tgt_lang
    return LoadedRun(cfg, build_model(cfg.model).eval(), TOK, TOK, Path("unused"), torch.device("cpu"))


def test_decodes_with_the_runs_config_and_writes_hypotheses(tmp_path):
    run = make_run(beam_size=3)
    result = evaluate_pairs(run, SOURCES, REFS, out=tmp_path / "test.hyp")
    hyps = (tmp_path / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert hyps == translate_texts(run.model, TOK, TOK, SOURCES, DecodeConfig(beam_size=3, length_penalty=1.0,
                                                                              max_len_b=4))
    assert result["bleu"] == pytest.approx(mt.bleu(hyps, REFS).value)
    assert result["sentences"] == 5 and result["ppl"] > 1 and "nbest_file" not in result


def test_nbest_file_lines_are_index_hypothesis_score_best_first(tmp_path):
    run = make_run(beam_size=3)
    result = evaluate_pairs(run, SOURCES, REFS, out=tmp_path / "test.hyp", n_best=3)
    lines = Path(result["nbest_file"]).read_text(encoding="utf-8").splitlines()
    assert Path(result["nbest_file"]) == tmp_path / "test.hyp.nbest" and len(lines) == 3 * len(SOURCES)
    parsed = []
    for line in lines:
        match = re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d+)", line)
        assert match, line
        parsed.append((int(match[1]), match[2], float(match[3])))
    assert [i for i, _, _ in parsed] == [i for i in range(len(SOURCES)) for _ in range(3)]
    hyps = (tmp_path / "test.hyp").read_text(encoding="utf-8").splitlines()
    for i in range(len(SOURCES)):
        entries = parsed[3 * i: 3 * i + 3]
        assert entries[0][1] == hyps[i]
        assert [s for _, _, s in entries] == sorted((s for _, _, s in entries), reverse=True)
        assert all(s < 0 for _, _, s in entries)


def test_bleu_tokenizer_follows_the_language_unless_named():
    hyps = ["我们今天去公园。", "这是一个测试。"]
    assert "tok:zh" in score(hyps, hyps, "zh")["bleu_signature"]
    assert "tok:13a" in score(hyps, hyps, "de")["bleu_signature"]
    assert "tok:intl" in score(hyps, hyps, "de", tokenize="intl")["bleu_signature"]
    with pytest.raises(ValueError, match="unknown BLEU tokenizer"):
        score(hyps, hyps, "de", tokenize="moses")


REF_TEXT = [f"the {w} sat on the mat near the {v} today" for w in ("cat", "dog", "bird", "fox", "cow", "hen")
            for v in ("door", "wall", "tree", "lake", "road")]
GOOD = [r.replace(" today", "") if i % 3 == 0 else r for i, r in enumerate(REF_TEXT)]
ALSO_GOOD = [r.replace(" today", "") if i % 3 == 1 else r for i, r in enumerate(REF_TEXT)]  # as good, other errors
BAD = [" ".join(reversed(r.split())) for r in REF_TEXT]


def test_compare_is_sacrebleus_paired_bootstrap_test():
    result = compare(GOOD, BAD, REF_TEXT, samples=200)
    assert result["bleu"] == pytest.approx(mt.bleu(GOOD, REF_TEXT).value)
    assert result["other_bleu"] == pytest.approx(mt.bleu(BAD, REF_TEXT).value)
    assert result["bleu"] > result["other_bleu"] and 0 < result["p_value"] < 0.05
    assert "bs:200" in result["signature"] and "seed:" in result["signature"]
    close = compare(GOOD, ALSO_GOOD, REF_TEXT, samples=200)  # the same errors in other sentences: no difference
    assert close["p_value"] > 0.05
    with pytest.raises(ValueError, match="as many"):
        compare(GOOD, BAD[:-1], REF_TEXT)


def test_evaluate_compares_with_another_systems_file(tmp_path):
    run = make_run(beam_size=2)
    (tmp_path / "src.txt").write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("\n".join(REFS) + "\n", encoding="utf-8")
    (tmp_path / "other.txt").write_text("\n".join(REFS) + "\n", encoding="utf-8")
    result = evaluate_files(run, tmp_path / "src.txt", tmp_path / "ref.txt", compare_with=tmp_path / "other.txt")
    assert set(result["compare"]) == {"bleu", "other_bleu", "p_value", "signature"}
    assert result["compare"]["bleu"] == pytest.approx(result["bleu"])
    assert result["compare"]["other_bleu"] == pytest.approx(100.0)
    assert 0 < result["compare"]["p_value"] <= 1


def test_tok_refs_add_tokenized_lowercased_bleu(tmp_path):
    run = make_run(beam_size=1)
    result = evaluate_pairs(run, SOURCES, REFS, out=tmp_path / "test.hyp", tok_refs=REFS)
    hyps = (tmp_path / "test.hyp").read_text(encoding="utf-8").splitlines()
    assert result["bleu_lc_tok"] == pytest.approx(mt.bleu(hyps, REFS, tokenize="none").value)
    assert "tok:none" in result["bleu_lc_tok_signature"]
    with pytest.raises(ValueError, match="tokenized references have 2 lines"):
        evaluate_pairs(run, SOURCES, REFS, tok_refs=REFS[:2])
