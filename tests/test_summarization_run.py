"""Summarization end to end through the one config / train / evaluate / translate / plot path.

A toy task whose summary copies a name from its document: ``<name> tool`` from filler words around
``<name>``. The copy run and the run without copying train a few steps; ``evaluate --lead
--baseline-run`` scores both beside the lead baseline on the same documents, an empty document is
one line, and the attention plot draws.
"""

import random

import pytest
import yaml

from seqmap.cli import main

FILLER = "the a of to in is it for on with as by at from this that be are was".split()


def rows(n: int, seed: int) -> list[str]:
    rng, out = random.Random(seed), []
    for _ in range(n):
        name = "".join(rng.choice("bcdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3))
        words = [rng.choice(FILLER) for _ in range(rng.randint(8, 20))]
        words.insert(rng.randrange(len(words)), name)
        out.append(" ".join(words) + ". more words here.\t" + f"{name} tool")
    return out


def config(tmp_path, copy: bool) -> str:
    for split, n, seed in (("train", 200, 0), ("valid", 20, 1), ("test", 20, 2)):
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows(n, seed)) + "\n")
    cfg = {"model": {"d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1, "dec_layers": 1, "dropout": 0.0,
                     "share_vocab": True, "copy": copy},
           "data": {**{s: str(tmp_path / f"{s}.tsv") for s in ("train", "valid", "test")}, "tokenizer": "bpe",
                    "vocab_size": 400, "max_src_len": 16, "max_len": 16, "src_lang": "en", "tgt_lang": "en"},
           "train": {"max_steps": 6, "lr": 3e-3, "warmup": 2, "max_tokens": 600, "valid_every": 6, "log_every": 3,
                     "early_stopping": "rougeL"},
           "decode": {"beam_size": 2, "max_len_a": 0.0, "max_len_b": 6}}
    path = tmp_path / f"cfg_{copy}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.mark.slow  # two runs, two evaluations and a plot: about 15 s
def test_train_evaluate_against_baselines_translate_and_plot(tmp_path, capsys):
    copy_run, plain_run = tmp_path / "copy", tmp_path / "plain"
    assert main(["train", config(tmp_path, True), "--run-dir", str(copy_run)]) == 0
    assert main(["train", config(tmp_path, False), "--run-dir", str(plain_run)]) == 0
    out = capsys.readouterr().out
    assert '"test_bleu"' in out and "ROUGE-1/2/L" in (copy_run / "train.log").read_text()
    src, ref = tmp_path / "test.src", tmp_path / "test.ref"
    pairs = [line.split("\t") for line in (tmp_path / "test.tsv").read_text().splitlines()]
    src.write_text("".join(s + "\n" for s, _ in pairs))
    ref.write_text("".join(r + "\n" for _, r in pairs))
    assert main(["evaluate", str(copy_run), "--src", str(src), "--ref", str(ref), "--lead",
                 "--baseline-run", str(plain_run)]) == 0
    out = capsys.readouterr().out
    assert "ROUGE-L = " in out and "stem:yes" in out
    table = out[out.index("the same 20 documents"):].splitlines()
    assert [line.split()[0] for line in table[2:5]] == ["copy", "lead", "plain"]
    assert table[5:] == [f"the baseline run's hypotheses written to {plain_run / 'eval' / 'test.src.hyp'}"]
    assert "(copy)" in table[2] and "(2 words)" in table[3] and "(no copy)" in table[4]
    assert main(["translate", str(copy_run), pairs[0][0]]) == 0
    assert main(["plot", "attention", str(copy_run), "--text", pairs[0][0], "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 0


def test_an_empty_document_is_one_line(tmp_path, capsys):
    run = tmp_path / "copy"
    cfg = yaml.safe_load(open(config(tmp_path, True)))
    cfg["train"]["max_steps"] = 1
    (tmp_path / "one.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["train", str(tmp_path / "one.yaml"), "--run-dir", str(run)]) == 0
    (tmp_path / "docs.src").write_text("a document about gagaga.\n\nanother one.\n")
    (tmp_path / "docs.ref").write_text("gagaga tool\nnothing\nother tool\n")
    capsys.readouterr()
    assert main(["evaluate", str(run), "--src", str(tmp_path / "docs.src"), "--ref", str(tmp_path / "docs.ref"),
                 "--lead", "7"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--src line 2 is empty: there is no document to summarize" in err[0]
