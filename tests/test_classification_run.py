"""A classifier end to end through the one config / train / classify path: it learns, and mistakes get one line."""

import io
import random
import sys

import pytest
import yaml

from seqmap.cli import main
from seqmap.config import ConfigError, RunConfig, from_dict
from seqmap.data.corpus import DataError
from seqmap.data.labels import LabelSet
from seqmap.runs import load_run

TOPICS = {"games": "play level score player quest".split(), "libs": "library function api header link".split(),
          "net": "server network socket http proxy".split()}
FILLER = "the a of to in is it for on with as by at from this that be are was".split()


def rows(n: int, seed: int) -> list[str]:
    """'text<TAB>label' lines: filler words with two words of the label's topic among them."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        label = rng.choice(sorted(TOPICS))
        text = [rng.choice(FILLER) for _ in range(rng.randint(4, 10))]
        for _ in range(2):
            text.insert(rng.randrange(len(text) + 1), rng.choice(TOPICS[label]))
        out.append(" ".join(text) + "\t" + label)
    return out


def config(tmp_path, **data) -> dict:
    for split, n, seed in (("train", 600, 0), ("valid", 60, 1), ("test", 60, 2)):
        (tmp_path / f"{split}.tsv").write_text("\n".join(rows(n, seed)) + "\n")
    return {"model": {"family": "classifier", "d_model": 32, "n_heads": 2, "d_ff": 64, "enc_layers": 1,
                      "dropout": 0.0, "pooling": "cls"},
            "data": {"task": "classification", "tokenizer": "word", "vocab_size": 200,
                     **{s: str(tmp_path / f"{s}.tsv") for s in ("train", "valid", "test")}, **data},
            "train": {"max_steps": 80, "lr": 3e-3, "warmup": 10, "schedule": "constant", "max_tokens": 400,
                      "valid_every": 40, "log_every": 20, "early_stopping": "accuracy", "label_smoothing": 0.0}}


def write(tmp_path, cfg: dict):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_train_then_classify(tmp_path, capsys, monkeypatch):
    run_dir = tmp_path / "run"
    assert main(["train", write(tmp_path, config(tmp_path)), "--run-dir", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert '"test_accuracy": ' in out and '"test_macro_f1": ' in out
    run = load_run(run_dir)
    assert run.labels == LabelSet(("games", "libs", "net")) and run.cfg.model.n_classes == 3
    assert main(["classify", str(run_dir), "the player of the quest", "a http proxy on a socket", "--top", "2"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [line[0] for line in lines] == ["games", "net"] and all(len(line) == 4 for line in lines)
    assert all(float(line[1]) > 0.5 for line in lines)
    expected = "\n".join("\t".join(line) for line in lines) + "\n"
    assert main(["classify", str(run_dir), "--top", "2", "the player of the quest", "a http proxy on a socket"]) == 0
    assert capsys.readouterr().out == expected  # texts after an option are texts (they were dropped: stdin read)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(  # read as a file is: BOM and CRLF dropped
        b"\xef\xbb\xbfthe player of the quest\r\na http proxy on a socket\r\n")))
    assert main(["classify", str(run_dir), "--top", "2"]) == 0
    assert capsys.readouterr().out == expected
    assert main(["classify", str(run_dir), "the \udcff player"]) == 2  # bytes that are not UTF-8, from sys.argv
    assert "TEXT 1 is not valid UTF-8 (character 5 is not text)" in capsys.readouterr().err


def test_other_verbs_refuse_a_classifier(tmp_path, capsys):
    run_dir = tmp_path / "run"
    cfg = config(tmp_path)
    cfg["train"]["max_steps"] = 2
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(run_dir)]) == 0
    # (seqmap serve takes a classifier: POST /classify, tests/serve/test_classify.py)
    for verb in (["translate", str(run_dir), "x"], ["generate", str(run_dir)],
                 ["evaluate", str(run_dir), "--src", "a", "--ref", "b"]):
        assert main(verb) == 2, verb
        assert "is a classifier" in capsys.readouterr().err, verb


def test_evaluate_a_classifier_with_its_confusion_matrix(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", write(tmp_path, config(tmp_path)), "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    test = str(tmp_path / "test.tsv")
    assert main(["evaluate", str(run_dir), "--data", test, "--confusion", str(tmp_path / "c.svg")]) == 0
    out = capsys.readouterr().out
    assert "(60 examples, 3 classes)" in out and "confusion matrix written to" in out
    # the same figures as the test split scored at the end of training
    logged = [line for line in (run_dir / "train.log").read_text().splitlines() if "test (60 texts" in line][0]
    accuracy = out.split("accuracy = ")[1].split()[0]
    assert f"accuracy {accuracy}" in logged
    svg = (tmp_path / "c.svg").read_text()
    assert all(name in svg for name in ("games", "libs", "net", "predicted", "gold"))
    (tmp_path / "bad.tsv").write_text("the player\tgames\nthe server\tweb\n")
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "bad.tsv")]) == 2
    assert "bad.tsv line 2: label 'web' is not one of the 3 classes" in capsys.readouterr().err
    assert main(["evaluate", str(run_dir)]) == 2
    assert "evaluate it on --data FILE" in capsys.readouterr().err


def test_confusion_matrix_counts_gold_rows_and_predicted_columns(tmp_path):
    from seqmap.metrics import confusion_matrix
    from seqmap.visualize import plot_confusion

    m = confusion_matrix([0, 1, 1, 2, 0], [0, 1, 2, 2, 1], 3)
    assert m == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    fig = plot_confusion(m, ["a", "b", "c"], tmp_path / "m.png")
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["1", "0", "0", "1", "1", "0", "0", "1", "1"]
    with pytest.raises(ValueError, match="must be 3 x 3"):
        plot_confusion([[1, 2]], ["a", "b", "c"], tmp_path / "m.png")


def test_a_label_training_never_saw_is_one_line_naming_it(tmp_path, capsys):
    cfg = config(tmp_path)
    (tmp_path / "valid.tsv").write_text("the player\tgames\nthe server\tweb\n")
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "data.valid: label 'web' is not one of the 3 classes seen in training (games, libs, net)" in err


def test_max_classes_merges_the_rarest_labels_into_other(tmp_path):
    from seqmap.tasks.classification import load_classification

    cfg = from_dict(RunConfig, config(tmp_path, max_classes=2))
    data = load_classification(cfg.data, tmp_path / "run", log=lambda line: None)
    assert data.labels.names[-1] == "other" and len(data.labels) == 2 and len(data.labels.merged) == 2


@pytest.mark.parametrize("model, data, train, message", [
    ({"family": "classifier"}, {"task": "translation"}, {}, "model.family=classifier and data.task=classification"),
    ({"family": "transformer"}, {"task": "classification"}, {}, "go together"),
    ({"family": "classifier"}, {"task": "classification"}, {"early_stopping": "bleu"}, "not measured for class"),
    ({"family": "transformer"}, {"task": "translation"}, {"early_stopping": "accuracy"}, "a classification metric"),
    ({"family": "classifier", "positional": "learned", "max_len": 64}, {"task": "classification", "max_len": 64},
     {}, r"data.max_len \+ 1 \(CLS\)"),
])
def test_config_mistakes_across_sections_are_one_line(model, data, train, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(RunConfig, {"model": model, "data": data, "train": train})


def test_a_classification_file_without_a_label_column_names_the_line(tmp_path):
    from seqmap.tasks.classification import load_classification

    cfg = from_dict(RunConfig, config(tmp_path))
    (tmp_path / "train.tsv").write_text("a text with no label\n")
    with pytest.raises(DataError, match="line 1 has 1 tab-separated column"):
        load_classification(cfg.data, tmp_path / "run", log=lambda line: None)


def test_plot_attention_of_a_classifier_shows_the_cls_row_and_the_prediction(tmp_path, capsys):
    import matplotlib

    matplotlib.use("Agg")
    from seqmap.visualize import plot_run_attention

    run_dir = tmp_path / "run"
    assert main(["train", write(tmp_path, config(tmp_path)), "--run-dir", str(run_dir)]) == 0
    run = load_run(run_dir)
    fig = plot_run_attention(run, "the player of the quest", tmp_path / "a.png")
    maps = [ax.images[0].get_array() for ax in fig.axes if ax.images]
    assert len(maps) == 2 and maps[0].shape == (6, 6)  # 1 layer x 2 heads; <cls> + 5 words
    assert "predicted: games" in fig._suptitle.get_text()
    assert main(["plot", "attention", str(run_dir), "--image", "x.png", "--out", str(tmp_path / "b.png")]) == 2
    assert capsys.readouterr().err == (f"seqmap: error: --image is for image classifiers (model.family=vit); "
                                       f"{run_dir} has data.task=classification\n")


def test_long_texts_are_truncated_not_dropped_and_the_baseline_scores_the_same_rows(tmp_path, capsys):
    """Model and TF-IDF baseline: fitted on the same training rows, scored on every test row (long ones too)."""
    from seqmap.data.pipeline import classification_ids
    from seqmap.tasks.classification import classification_train_rows, load_classification
    from seqmap.training.runlog import read_metrics

    cfg = config(tmp_path, max_len=12)
    long_text = " ".join(["the player of the quest"] * 20)  # 100 words, far beyond data.max_len
    for split in ("train", "valid", "test"):
        with open(tmp_path / f"{split}.tsv", "a") as f:
            f.write(f"{long_text}\tgames\n")
    run_dir = tmp_path / "run"
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(run_dir)]) == 0
    log = (run_dir / "train.log").read_text()
    assert "train: kept 601 of 601 pairs; dropped none; " in log and "valid: kept 61 of 61 pairs" in log
    test, baseline = read_metrics(run_dir, "test")[0], read_metrics(run_dir, "test_baseline")[0]
    assert test["examples"] == baseline["examples"] == 61  # every test row, the long one included
    assert baseline["model"] == "tfidf+logreg" and baseline["accuracy"] > 80  # the topic words separate the classes
    assert "tfidf+logreg" in log and "the same 61 texts" in log
    assert f'"baseline_accuracy": {round(baseline["accuracy"], 2)}' in capsys.readouterr().out
    data = load_classification(from_dict(RunConfig, cfg).data, run_dir, log=lambda line: None)
    train = classification_train_rows(from_dict(RunConfig, cfg).data)  # what the baseline was fitted on
    assert [(ids.tolist(), c) for ids, c in data.train] == [
        (classification_ids(data.tok, t, 12), data.labels.encode(label)) for t, label in train]
    assert max(len(ids) for ids, _ in data.train) == 12 and len(data.test_text) == 61
    assert classification_ids(data.tok, long_text, 12) == data.tok.encode(long_text)[:12]
    capsys.readouterr()
    # seqmap evaluate: the same rows, the same two figures as at the end of training
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "test.tsv")]) == 0
    out = capsys.readouterr().out
    row = [line.split() for line in out.splitlines() if line.strip().startswith("tfidf+logreg")][0]
    assert float(row[1]) == pytest.approx(baseline["accuracy"], abs=0.005) and "(61 examples" in out
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "test.tsv"), "--no-baseline"]) == 0
    assert "tfidf+logreg" not in capsys.readouterr().out
    assert main(["classify", str(run_dir), long_text]) == 0 and capsys.readouterr().out.startswith("games\t")


def test_without_scikit_learn_training_says_how_to_install_the_baseline(tmp_path, monkeypatch, capsys):
    import sys

    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    cfg = config(tmp_path)
    cfg["train"]["max_steps"] = 2
    run_dir = tmp_path / "run"
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(run_dir)]) == 0
    assert "no baseline: the TF-IDF + logistic regression baseline needs scikit-learn: pip install 'seqmap[baseline]'" \
        in (run_dir / "train.log").read_text()
    capsys.readouterr()
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "test.tsv")]) == 2
    assert "pip install 'seqmap[baseline]' (or pass --no-baseline)" in capsys.readouterr().err


def test_the_debian_config_with_missing_or_malformed_data_is_one_line(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    config_file = str(Path(__file__).resolve().parents[1] / "configs" / "debian_sections.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["train", config_file, "--run-dir", "run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.train: file not found: data/debian-descriptions/train.tsv" in err[0]
    (tmp_path / "data" / "debian-descriptions").mkdir(parents=True)
    for split in ("train", "valid", "test"):  # one column: the label column is missing
        (tmp_path / "data" / "debian-descriptions" / f"{split}.tsv").write_text("a library for parsing JSON\n")
    assert main(["train", config_file, "--run-dir", "run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "train.tsv: line 1 has 1 tab-separated column(s), need 2" in err[0]


def test_a_resumed_classifier_reads_the_batches_and_losses_of_an_uninterrupted_run(tmp_path):
    """Batches planned from the prepared corpus's lengths resume where they stopped, mid-epoch."""
    from seqmap.training.runlog import read_metrics

    cfg = config(tmp_path)
    cfg["train"].update(max_steps=30, valid_every=15, log_every=1)
    path = write(tmp_path, cfg)
    assert main(["train", path, "--run-dir", str(tmp_path / "straight")]) == 0
    assert main(["train", path, "--run-dir", str(tmp_path / "resumed"), "--train.max_steps", "15"]) == 0
    assert main(["train", "--resume", str(tmp_path / "resumed"), "--train.max_steps", "30"]) == 0
    assert "read from memory-mapped files" in (tmp_path / "resumed" / "train.log").read_text()
    losses = {run: [(m["step"], m["epoch"], m["loss"]) for m in read_metrics(tmp_path / run, "train")]
              for run in ("straight", "resumed")}
    assert [step for step, _, _ in losses["straight"]] == list(range(1, 31)) and losses["straight"][-1][1] >= 1
    assert losses["resumed"] == losses["straight"]  # bit for bit: the same batches in the same order
