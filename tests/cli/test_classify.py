"""``seqmap classify``: texts from arguments or ``--input``, one line per text with its ``--top`` classes, and the
mistakes in its options as one line. An untrained classifier (a second): these tests check the command, not the
predictions."""

import pytest
import torch

from seqmap.checkpoints import CheckpointManager
from seqmap.cli import main
from seqmap.config import DataConfig, ModelConfig, RunConfig, TrainConfig, to_dict
from seqmap.data.labels import LabelSet
from seqmap.data.pipeline import LABELS_FILE
from seqmap.data.tokenizers import save_pair, train_pair
from seqmap.models.builder import build_model
from seqmap.runs import load_run

CLASSES = ("games", "libs", "net")


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    texts = ["the player of the quest", "a http proxy on a socket", "a library function"]
    tok, _ = train_pair("word", texts, texts, joint=True)
    save_pair(tok, tok, root / "tok")
    LabelSet(CLASSES).save(root / "tok" / LABELS_FILE)
    cfg = RunConfig(model=ModelConfig(family="classifier", src_vocab=tok.vocab_size, tgt_vocab=tok.vocab_size,
                                      n_classes=len(CLASSES), d_model=16, n_heads=2, d_ff=32, enc_layers=1,
                                      dropout=0.0),
                    data=DataConfig(task="classification", tokenizer="word"), train=TrainConfig())
    torch.manual_seed(0)
    CheckpointManager(root / "run").save(1, model=build_model(cfg.model), trainer_state={"step": 1},
                                         config=to_dict(cfg), tokenizer_dir=root / "tok")
    return root / "run"


def _columns(out: str) -> list[list[str]]:
    return [line.split("\t") for line in out.splitlines()]


def test_top_k_classes_per_text_most_likely_first_at_most_every_class(classifier, capsys):
    assert main(["classify", str(classifier), "the player of the quest", "a library function", "--top", "10"]) == 0
    rows = _columns(capsys.readouterr().out)
    assert len(rows) == 2 and all(len(row) == 2 * len(CLASSES) for row in rows)  # 10 is cut to the 3 classes
    for row in rows:
        names, probs = row[0::2], [float(p) for p in row[1::2]]
        assert sorted(names) == sorted(CLASSES) and probs == sorted(probs, reverse=True)
        assert sum(probs) == pytest.approx(1.0, abs=2e-3)  # three rounded to 3 decimals
    assert main(["classify", str(classifier), "the player of the quest"]) == 0
    (best,) = _columns(capsys.readouterr().out)
    assert best == rows[0][:2]  # the default --top 1 is the first of the list


def test_input_file_gives_one_line_per_line_as_arguments_do(classifier, tmp_path, capsys):
    """An empty line is classified too, so line i of the output is line i of the input."""
    run = load_run(classifier)
    texts = ["the player of the quest", "", "a http proxy on a socket"]
    (tmp_path / "texts.txt").write_text("".join(t + "\n" for t in texts))
    assert main(["classify", str(classifier), "--input", str(tmp_path / "texts.txt"), "--top", "2"]) == 0
    from_file = capsys.readouterr().out
    assert main(["classify", str(classifier), *texts, "--top", "2"]) == 0
    assert capsys.readouterr().out == from_file and len(_columns(from_file)) == 3
    assert {row[0] for row in _columns(from_file)} <= set(run.labels.names)


@pytest.mark.parametrize("options, message", [
    (["a text", "--input", "FILE"], "give texts as arguments or --input FILE, not both"),
    (["a text", "--top", "0"], "--top must be at least 1, got 0"),
    (["--input", "EMPTY"], "--input: EMPTY: the file is empty; point --input at a file with one sentence per line"),
])
def test_mistakes_are_one_line(classifier, tmp_path, capsys, options, message):
    (tmp_path / "texts.txt").write_text("a text\n")
    (tmp_path / "empty.txt").write_text("")
    names = {"FILE": str(tmp_path / "texts.txt"), "EMPTY": str(tmp_path / "empty.txt")}
    assert main(["classify", str(classifier), *[names.get(o, o) for o in options]]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"seqmap: error: {message.replace('EMPTY', names['EMPTY'])}\n"


def test_config_overrides_that_classify_would_ignore_are_refused(classifier, tmp_path, capsys):
    """`seqmap classify RUN TEXT --decode.beam_size 3` classified as if the option were not there."""
    assert main(["classify", str(classifier), "a text", "--decode.beam_size", "3"]) == 2
    assert capsys.readouterr().err == ("seqmap: error: seqmap classify takes no --SECTION.KEY options; leave out "
                                       "--decode.beam_size\n")
    (tmp_path / "test.tsv").write_text("a library function\tlibs\n")
    assert main(["evaluate", str(classifier), "--data", str(tmp_path / "test.tsv"), "--no-baseline",
                 "--decode.max_len_b=3"]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --decode.max_len_b is for translation runs and speech runs; "
                                       f"{classifier} is a classifier: leave out --decode.max_len_b\n")
    assert main(["evaluate", str(classifier), "--data", str(tmp_path / "test.tsv"), "--no-baseline"]) == 0
    assert capsys.readouterr().out.startswith("accuracy = ")
