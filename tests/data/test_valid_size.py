"""data.valid_size: without data.valid, every kind of run validates on the last N training examples.

The examples are held out when the data is read, before anything is fitted on the training data
(tokenizer, classes, pixel statistics), so validation is unseen; the same config always holds out
the same examples, so ``--resume`` and ``seqmap evaluate`` see the split training saw.
"""

import numpy as np
import pytest
import yaml

from seqmap.cli import main
from seqmap.config import ConfigError, DataConfig
from seqmap.data.corpus import DataError
from seqmap.data.tokenizer_base import UNK
from seqmap.tasks.classification import classification_train_rows, load_classification, read_classification_texts
from seqmap.tasks.lm import load_lm, read_lm_texts
from seqmap.tasks.speech import speech_split
from seqmap.tasks.translation import load_translation, read_translation_texts

PAIRS = [("a b", "x y"), ("b c", "y z"), ("c a", "z x"), ("a c", "x z"), ("zebra a", "okapi x"), ("b zebra", "y okapi")]


def _tsv(path, rows) -> str:
    path.write_text("".join("\t".join(row) + "\n" for row in rows))
    return str(path)


@pytest.mark.parametrize("aligned", [False, True])
def test_translation_holds_out_the_last_pairs_before_the_tokenizer_is_trained(tmp_path, aligned):
    if aligned:
        (tmp_path / "train.src").write_text("".join(s + "\n" for s, _ in PAIRS))
        (tmp_path / "train.tgt").write_text("".join(t + "\n" for _, t in PAIRS))
        files = {"train_src": str(tmp_path / "train.src"), "train_tgt": str(tmp_path / "train.tgt")}
    else:
        files = {"train": _tsv(tmp_path / "train.tsv", PAIRS)}
    log = []
    cfg = DataConfig(**files, valid_size=2, tokenizer="word", vocab_size=50, joint_vocab=False)
    data = load_translation(cfg, tmp_path / "run", log.append)
    assert len(data.train) == 4 and data.valid_text == PAIRS[4:]
    assert data.src_tok.encode("zebra") == [UNK] and data.tgt_tok.encode("okapi") == [UNK]  # never trained on
    assert data.valid[0] == (data.src_tok.encode("zebra a"), data.tgt_tok.encode("okapi x"))
    assert any("the last 2 of the 6 training pairs" in line for line in log)
    assert read_translation_texts(cfg)["train"] == PAIRS[:4]  # what evaluate's lead baseline reads


def test_lm_holds_out_the_last_lines(tmp_path):
    (tmp_path / "train.txt").write_text("a b\nb c\nc a\nzebra a\nb zebra\n")
    cfg = DataConfig(task="lm", train=str(tmp_path / "train.txt"), valid_size=2, tokenizer="word", vocab_size=50)
    assert read_lm_texts(cfg) == {"train": "a b\nb c\nc a\n", "valid": "zebra a\nb zebra\n", "test": ""}
    data = load_lm(cfg, tmp_path / "run", lambda _: None)
    assert len(data.train) == 9 and len(data.valid) == 6  # 2 words + EOS a line
    assert data.tok.encode("zebra") == [UNK]


def test_a_character_lm_holds_out_lines_too(tmp_path):
    (tmp_path / "train.txt").write_text("ab\nba\nzz\n")
    cfg = DataConfig(task="lm", train=str(tmp_path / "train.txt"), valid_size=1, tokenizer="char", vocab_size=50)
    data = load_lm(cfg, tmp_path / "run", lambda _: None)
    assert data.tok.decode(data.train) == "ab\nba\n" and len(data.valid) == 3
    assert data.tok.encode("z") == [UNK]  # the held-out line's character was never in the vocabulary


ROWS = [("good film", "pos"), ("bad film", "neg"), ("good plot", "pos"), ("bad plot", "neg"),
        ("zebra good", "pos"), ("zebra bad", "neg")]


def test_classification_holds_out_the_last_rows_before_tokenizer_and_baseline(tmp_path):
    cfg = DataConfig(task="classification", train=_tsv(tmp_path / "train.tsv", ROWS), valid_size=2,
                     tokenizer="word", vocab_size=50)
    data = load_classification(cfg, tmp_path / "run", lambda _: None)
    assert [(ids.tolist(), c) for ids, c in data.train] == [
        (data.tok.encode(t), data.labels.encode(label)) for t, label in ROWS[:4]] and data.valid_text == ROWS[4:]
    assert [label for _, label in data.valid] == [data.labels.encode("pos"), data.labels.encode("neg")]
    assert data.tok.encode("zebra") == [UNK]
    assert classification_train_rows(cfg) == ROWS[:4]  # evaluate's TF-IDF baseline fits on the same rows


def test_a_held_out_label_training_never_saw_names_data_valid_size(tmp_path):
    cfg = DataConfig(task="classification", train=_tsv(tmp_path / "train.tsv", [*ROWS, ("meh film", "mixed")]),
                     valid_size=1, tokenizer="word", vocab_size=50)
    with pytest.raises(DataError, match=r"data.valid_size=1 \(the last 1 of data.train\): label 'mixed'"):
        load_classification(cfg, tmp_path / "run", lambda _: None)


def test_speech_holds_out_the_last_recordings(tmp_path):
    rng = np.random.default_rng(0)
    waves = [rng.integers(-3000, 3000, 1000).astype(np.int16) for _ in range(6)]
    arrays = dict(audio=np.concatenate(waves), offsets=np.cumsum([0] + [len(w) for w in waves]),
                  text=np.array(["0", "1", "2", "0", "1", "2"]), speaker=np.array(["a", "a", "a", "b", "b", "c"]),
                  sample_rate=np.array(8000))
    np.savez(tmp_path / "s.npz", **arrays)
    cfg = DataConfig(task="speech", train=str(tmp_path / "s.npz"), valid_size=2, exclude_speakers=["b"])
    train, valid = speech_split(cfg, "train"), speech_split(cfg, "valid")
    assert [train.text(i) for i in range(len(train))] == ["0", "1"]  # b's recordings are left out of both
    assert [valid.text(i) for i in range(len(valid))] == ["2", "2"]
    assert [valid.speaker(i) for i in range(len(valid))] == ["a", "c"]
    assert speech_split(cfg, "test") is None
    np.savez(tmp_path / "marked.npz", **arrays, split=np.array(["train"] * 4 + ["valid", "test"]))
    with pytest.raises(DataError, match="already marks each recording's split .*; remove data.valid_size=2"):
        speech_split(DataConfig(task="speech", train=str(tmp_path / "marked.npz"), valid_size=2), "train")


@pytest.mark.parametrize("task, rows, noun", [
    ("translation", PAIRS, "pairs"), ("classification", ROWS, "rows"), ("lm", None, "lines")])
def test_holding_out_every_example_is_one_line_naming_data_valid_size(tmp_path, task, rows, noun):
    if rows is None:
        (tmp_path / "train.txt").write_text("".join(f"line {i}\n" for i in range(6)))
        path = str(tmp_path / "train.txt")
    else:
        path = _tsv(tmp_path / "train.tsv", rows)
    load = {"translation": load_translation, "classification": load_classification, "lm": load_lm}[task]
    with pytest.raises(DataError) as error:
        load(DataConfig(task=task, train=path, valid_size=6, tokenizer="word"), tmp_path / "run", lambda _: None)
    message = str(error.value)
    assert message == (f"data.valid_size=6: cannot hold out 6 of 6 {noun} from data.train ({path}) for validation "
                       "and train on the rest; set data.valid_size between 1 and 5, or give data.valid")


@pytest.mark.parametrize("task, read", [
    ("translation", read_translation_texts), ("classification", read_classification_texts), ("lm", read_lm_texts)])
def test_without_data_valid_or_valid_size_the_error_names_both(tmp_path, task, read):
    cfg = DataConfig(task=task, train=_tsv(tmp_path / "train.tsv", PAIRS))
    with pytest.raises(DataError, match="data.valid_size"):
        read(cfg)


@pytest.mark.parametrize("data, message", [
    ({"train": "t.tsv", "valid": "v.tsv"}, "give data.valid or data.valid_size, not both"),
    ({"train_src": "t.de", "train_tgt": "t.en", "valid_src": "v.de", "valid_tgt": "v.en"},
     "give data.valid_src/valid_tgt or data.valid_size, not both"),
    ({"dataset": "tatoeba-en-zh"}, "data.dataset=tatoeba-en-zh brings its own validation split"),
    ({"task": "graph", "train": "cora"}, "data.task=graph validates on the graph's val_idx nodes"),
])
def test_valid_size_beside_another_validation_set_is_refused(data, message):
    with pytest.raises(ConfigError, match=message) as error:
        DataConfig(**data, valid_size=2)
    assert "\n" not in str(error.value)


def test_resume_validates_on_the_same_held_out_pairs(tmp_path, capsys):
    rows = [(f"w{i} w{i + 1}", f"v{i} v{i + 1}") for i in range(12)]
    cfg = {"model": {"d_model": 16, "n_heads": 2, "d_ff": 32, "enc_layers": 1, "dec_layers": 1},
           "data": {"train": _tsv(tmp_path / "train.tsv", rows), "valid_size": 3, "tokenizer": "word",
                    "vocab_size": 40},
           "train": {"device": "cpu", "max_steps": 2, "valid_every": 2, "warmup": 1, "max_tokens": 64,
                     "valid_examples": 3, "log_every": 1}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    assert main(["train", str(tmp_path / "cfg.yaml"), "--run-dir", str(run)]) == 0
    assert main(["train", "--resume", str(run), "--train.max_steps", "4"]) == 0
    capsys.readouterr()
    log = (run / "train.log").read_text()
    sources = [line.split("source", 1)[1].strip() for line in log.splitlines() if " source " in line]
    assert sources == [s for s, _ in rows[9:]] * 2  # the first run's validation, then the resumed run's
    assert log.count("valid: the last 3 of the 12 training pairs of data.train") == 2
