"""``seqmap evaluate`` options: the summary baselines (``--lead``, ``--baseline-run``) scored beside the run on the
same documents, their mistakes found before any decoding, and options that another kind of run reads refused
instead of ignored. Untrained checkpoints (seconds): these tests check what is scored and what the user reads."""

import shutil
from pathlib import Path

import pytest
import torch

import seqmap.evaluation
from seqmap.checkpoints import CheckpointManager
from seqmap.cli import main
from seqmap.config import DataConfig, DecodeConfig, ModelConfig, RunConfig, TrainConfig, to_dict
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import LABELS_FILE
from seqmap.data.tokenizers import save_pair, train_pair
from seqmap.models.builder import build_model

DOCS = ["alpha beta gamma. delta epsilon", "zeta eta theta iota. kappa", "lambda mu. nu xi omicron"]
REFS = ["alpha beta", "zeta eta", "lambda mu"]  # each document's first two words
TRAIN = ["one\tsummary", "two\ta short summary", "three\tthe summary of three"]  # targets of 1, 3, 4 words


def _run(root: Path, name: str, *, task: str = "translation", tgt_lang: str = "en", train: str | None = None,
         test: str | None = None, lowercase: bool = False, valid_size: int = 0) -> Path:
    """A run directory (``RUN/checkpoints/step-000001``) holding an untrained tiny model of ``task``."""
    texts = [*DOCS, *REFS, "one two three summary short the of a"]
    tok, _ = train_pair("word", texts, texts, joint=True)
    save_pair(tok, tok, root / f"{name}-tok")
    model = dict(d_model=16, n_heads=2, d_ff=32, enc_layers=1, dec_layers=1, dropout=0.0, src_vocab=tok.vocab_size,
                 tgt_vocab=tok.vocab_size)
    if task == "classification":
        LabelSet(("games", "libs")).save(root / f"{name}-tok" / LABELS_FILE)
        model.update(family="classifier", n_classes=2)
    data = DataConfig(task=task, tokenizer="word", tgt_lang=tgt_lang, train=train,
                      valid=None if valid_size else train, valid_size=valid_size, test=test, max_len=32,
                      lowercase=lowercase)
    cfg = RunConfig(model=ModelConfig(**model), data=data, train=TrainConfig(),
                    decode=DecodeConfig(max_len_a=0.0, max_len_b=3))
    torch.manual_seed(0)
    CheckpointManager(root / name).save(1, model=build_model(cfg.model), trainer_state={"step": 1},
                                        config=to_dict(cfg), tokenizer_dir=root / f"{name}-tok")
    return root / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("evaluate")
    (root / "train.tsv").write_text("".join(row + "\n" for row in TRAIN))
    (root / "docs.src").write_text("".join(d + "\n" for d in DOCS))
    (root / "docs.ref").write_text("".join(r + "\n" for r in REFS))
    (root / "test.tsv").write_text("".join(f"{d}\t{r.title()}\n" for d, r in zip(DOCS, REFS, strict=True)))
    train = str(root / "train.tsv")
    held = [*TRAIN, "four\ta summary", "\tan empty source", " ".join(["long"] * 40) + "\ttoo long"]
    (root / "held.tsv").write_text("".join(row + "\n" for row in held))  # the last 3 are held out; 1 is kept
    return {"summ": _run(root, "summ", train=train), "plain": _run(root, "plain", train=str(root / "gone.tsv")),
            "zh": _run(root, "zh", tgt_lang="zh", train=train),
            "classifier": _run(root, "classifier", task="classification", train=train),
            "tested": _run(root, "tested", train=train, test=str(root / "test.tsv"), lowercase=True),
            "test_gone": _run(root, "test_gone", train=train, test=str(root / "gone.tsv")),
            "train_gone": _run(root, "train_gone", train=str(root / "gone.tsv"), test=str(root / "test.tsv")),
            "held_out": _run(root, "held_out", train=str(root / "held.tsv"), valid_size=3),
            "src": root / "docs.src", "ref": root / "docs.ref"}


def _files(runs, tmp_path) -> list[str]:
    return ["--src", str(runs["src"]), "--ref", str(runs["ref"]), "--out", str(tmp_path / "docs.hyp")]


def test_the_lead_and_another_run_are_scored_on_the_same_documents(runs, tmp_path, capsys):
    shutil.rmtree(runs["plain"] / "eval", ignore_errors=True)  # whatever another test wrote there
    assert main(["evaluate", str(runs["summ"]), *_files(runs, tmp_path), "--lead", "2",
                 "--baseline-run", str(runs["plain"])]) == 0
    out = capsys.readouterr().out
    table = out[out.index("the same 3 documents (rouge-score:"):].splitlines()
    assert table[1].split() == ["ROUGE-1", "ROUGE-2", "ROUGE-L", "BLEU"]
    names = [line[:30].strip() for line in table[2:5]]
    assert names == ["summ (no copy)", "lead (2 words)", "plain (no copy)"] and len(table) == 6
    assert table[3].split()[3:6] == ["100.00", "100.00", "100.00"]  # the first two words are the references
    ours = table[2].split()[3:]
    assert ours[2] == f"{float(out.split('ROUGE-L = ')[1].split()[0]):.2f}"  # this run's row is the scores above
    # the run's hypotheses go to --out, the other run's beside them (not into the other run's folder)
    assert (tmp_path / "docs.hyp").read_text().count("\n") == 3
    assert (tmp_path / "docs.baseline.hyp").read_text().count("\n") == 3
    assert f"the baseline run's hypotheses written to {tmp_path / 'docs.baseline.hyp'}" in out
    assert not (runs["plain"] / "eval").exists()


def test_without_out_each_run_writes_its_hypotheses_into_its_own_eval_folder(runs, capsys):
    assert main(["evaluate", str(runs["summ"]), "--src", str(runs["src"]), "--ref", str(runs["ref"]),
                 "--baseline-run", str(runs["plain"])]) == 0
    assert (runs["summ"] / "eval" / "docs.src.hyp").read_text().count("\n") == 3
    assert (runs["plain"] / "eval" / "docs.src.hyp").read_text().count("\n") == 3
    assert f"written to {runs['plain'] / 'eval' / 'docs.src.hyp'}" in capsys.readouterr().out


def test_the_leads_length_is_by_default_the_median_of_the_training_targets(runs, tmp_path, capsys):
    assert main(["evaluate", str(runs["summ"]), *_files(runs, tmp_path), "--lead"]) == 0
    rows = capsys.readouterr().out.split("the same 3 documents")[1].splitlines()
    assert rows[3].split()[:3] == ["lead", "(3", "words)"]  # targets of 1, 3 and 4 words


@pytest.mark.parametrize("run, options, message", [
    ("summ", ["--lead", "-1"], "--lead WORDS must be > 0 (or left out: the training targets' median), got -1"),
    ("summ", ["--baseline-run", "NOWHERE"], "NOWHERE does not exist; give a run directory or a checkpoint directory"),
    ("summ", ["--baseline-run", "CLASSIFIER"], "CLASSIFIER was trained for data.task=classification, not "
                                               "translation; use `seqmap classify` on it"),
    ("plain", ["--lead"], "cannot read the run's training targets for the lead's length"),
    ("zh", ["--lead", "2"], "ROUGE is not measured for target language 'zh'; the summary baselines (--lead, "
                            "--baseline-run) need a Latin-script target"),
    ("summ", ["--compare", "SHORT"], "--compare SHORT has 1 lines but there are 3 sources; give the other "
                                     "system's hypotheses of the same sentences, one per line"),
])
def test_mistakes_in_the_baselines_and_the_comparison_are_found_before_decoding(runs, tmp_path, monkeypatch, capsys,
                                                                               run, options, message):
    """They were found after the whole test set had been decoded and its scores printed."""
    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded before the options were checked")

    monkeypatch.setattr(seqmap.evaluation, "translate_texts", no_decoding)
    (tmp_path / "short.hyp").write_text("a\n")
    names = {"NOWHERE": str(tmp_path / "nowhere"), "CLASSIFIER": str(runs["classifier"]),
             "SHORT": str(tmp_path / "short.hyp")}
    options = [names.get(o, o) for o in options]
    for name, path in names.items():
        message = message.replace(name, path)
    assert main(["evaluate", str(runs[run]), *_files(runs, tmp_path), *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"seqmap: error: {message}") and captured.err.count("\n") == 1


@pytest.mark.parametrize("run, options, message", [
    ("summ", ["--confusion", "c.png"], "--confusion is for classifiers, image classifiers and graph runs; RUN is a "
                                       "translation run: leave out --confusion"),
    ("summ", ["--data", "test.tsv"], "--data is for language models, speech runs, classifiers, image classifiers "
                                     "and graph runs; RUN is a translation run: leave out --data"),
    ("summ", ["--split", "val"], "--split val scores the run's own data; leave it out with --src and --ref"),
    ("summ", ["--no-baseline"], "--no-baseline is for classifiers and image classifiers; RUN is a translation run"),
    ("classifier", ["--data", "test.tsv", "--src", "a.txt"], "--src is for translation runs; RUN is a classifier: "
                                                             "leave out --src"),
    ("classifier", ["--data", "test.tsv", "--nbest", "2"], "--nbest is for translation runs; RUN is a classifier"),
    ("classifier", ["--data", "test.tsv", "--out", "x.hyp"], "--out is for translation runs and speech runs; RUN is "
                                                             "a classifier"),
    ("classifier", ["--data", "test.tsv", "--lead"], "--lead is for translation runs; RUN is a classifier"),
])
def test_options_that_another_kind_of_run_reads_are_refused_not_ignored(runs, tmp_path, monkeypatch, capsys, run,
                                                                        options, message):
    """A --confusion for a translation run drew nothing, a --src for a classifier read nothing, and both said
    nothing about it."""
    monkeypatch.chdir(tmp_path)
    files = _files(runs, tmp_path) if run == "summ" else []
    assert main(["evaluate", str(runs[run]), *files, *options]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("seqmap: error: " + message.replace("RUN", str(runs[run])))
    assert list(tmp_path.iterdir()) == []  # nothing decoded, drawn or written


def test_a_translation_run_without_src_and_ref_is_scored_on_its_own_test_split(runs, tmp_path, capsys):
    """As training scored it: the config's test pairs, normalized as training read them (here lowercased:
    the references in test.tsv are title-cased), hypotheses in RUN_DIR/eval/test.hyp."""
    assert main(["evaluate", str(runs["tested"])]) == 0
    split = capsys.readouterr().out
    assert (runs["tested"] / "eval" / "test.hyp").read_text().count("\n") == 3
    assert f"3 hypotheses written to {runs['tested'] / 'eval' / 'test.hyp'}" in split
    (tmp_path / "test.ref").write_text("".join(r + "\n" for r in REFS))  # the lowercased references
    assert main(["evaluate", str(runs["tested"]), "--src", str(runs["src"]), "--ref", str(tmp_path / "test.ref"),
                 "--out", str(tmp_path / "files.hyp")]) == 0
    files = capsys.readouterr().out
    assert split.split("\n")[:4] == files.split("\n")[:4]  # BLEU, chrF, TER and perplexity lines
    assert (tmp_path / "files.hyp").read_text() == (runs["tested"] / "eval" / "test.hyp").read_text()


@pytest.mark.parametrize("run, options, message", [
    ("tested", ["--src", "SRC"], "give --src FILE and --ref FILE together, or neither to score the run's own "
                                 "--split (default: test)"),
    ("tested", ["--src", "SRC", "--ref", "REF", "--split", "val"],
     "--split val scores the run's own data; leave it out with --src and --ref"),
    ("tested", ["--lead", "2"], "--lead scores the documents of --src FILE against --ref FILE; give both"),
    ("summ", [], "the run's config names no test data (data.test or data.test_src and data.test_tgt); give --src "
                 "FILE and --ref FILE"),
    ("test_gone", [], "data.test: file not found:"),
])
def test_scoring_the_runs_own_split_explains_what_is_missing_in_one_line(runs, capsys, run, options, message):
    options = [str(runs["src"]) if o == "SRC" else str(runs["ref"]) if o == "REF" else o for o in options]
    assert main(["evaluate", str(runs[run]), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"seqmap: error: {message}") and err.count("\n") == 1, err


def test_the_test_split_is_read_without_the_training_files(runs, capsys):
    """Every split's files were read, so a run whose training data had moved away could not score its test split."""
    assert main(["evaluate", str(runs["train_gone"])]) == 0
    assert f"3 hypotheses written to {runs['train_gone'] / 'eval' / 'test.hyp'}" in capsys.readouterr().out


def test_split_val_scores_the_pairs_training_validated_on(runs, capsys):
    """data.valid_size=3 holds out the last 3 training pairs; training dropped the empty and the over-long one
    (data.max_len=32) and validated on the one left, which --split val scored beside the two dropped ones."""
    from seqmap.runs import load_run
    from seqmap.tasks.translation import split_texts

    run = load_run(runs["held_out"], pack=False)
    assert split_texts(run, "val") == (["four"], ["a summary"])
    train = split_texts(run, "train")
    assert train == ([row.split("\t")[0] for row in TRAIN], [row.split("\t")[1] for row in TRAIN])
    assert main(["evaluate", str(runs["held_out"]), "--split", "val"]) == 0
    assert f"1 hypotheses written to {runs['held_out'] / 'eval' / 'val.hyp'}" in capsys.readouterr().out


def test_a_split_that_training_kept_none_of_is_one_line_naming_why(tmp_path, capsys):
    """Every held-out pair was dropped by training; evaluate said "no references given"."""
    (tmp_path / "train.tsv").write_text("".join(row + "\n" for row in [*TRAIN, "\tan empty source"]))
    run = _run(tmp_path, "none_kept", train=str(tmp_path / "train.tsv"), valid_size=1)
    assert main(["evaluate", str(run), "--split", "val"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: training kept none of the 1 valid pairs (each empty, or "
                                       "longer than data.max_len=32 tokens); give --src FILE and --ref FILE\n")


@pytest.mark.parametrize("run, options, message", [
    ("tested", ["--tok-ref", "ONE_LINE"], "the tokenized references have 1 lines but the references 3; give --tok-ref "
                                          "the same sentences, one per line\n"),
    ("test_gone", [], "(check the path; relative paths start at CWD); or give --src FILE and --ref FILE\n"),
])
def test_what_cannot_be_scored_says_what_to_give_instead(runs, tmp_path, monkeypatch, capsys, run, options, message):
    """These lines named the problem only: a --tok-ref of another length, a test file moved away."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "one.tok").write_text("a\n")
    options = ["one.tok" if o == "ONE_LINE" else o for o in options]
    assert main(["evaluate", str(runs[run]), *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("seqmap: error: ") and err.count("\n") == 1, err
    assert err.endswith(message.replace("RUN", str(runs[run])).replace("CWD", str(tmp_path))), err
