"""A GAT on a graph end to end through the one config / train / evaluate / plot path, and its mistakes as one line.

The graphs are tiny and synthetic (60 nodes, 3 classes): features carry a noisy hint of the class and
most edges join nodes of one class, so a few dozen full-batch steps learn them on a CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from seqmap.checkpoints import load_checkpoint
from seqmap.checkpoints import manager as checkpoint_manager
from seqmap.cli import main
from seqmap.config import ConfigError, RunConfig, from_dict
from seqmap.data.graphs import load_planetoid
from seqmap.models.gat import GAT
from seqmap.runs import load_run
from seqmap.training.run_trainer import train

N, F_IN, C = 60, 10, 3


def graph_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    """Labels in turn 0, 1, 2, ...; a noisy class feature; mostly same-class edges; 15 / 15 / 30 split."""
    rng = np.random.default_rng(seed)
    labels = np.arange(N) % C
    features = (rng.random((N, F_IN)) < 0.2).astype(np.float32)
    hint = rng.random(N) < 0.6  # 60% of the nodes show their class in their features
    features[np.arange(N)[hint], labels[hint]] = 1.0
    src, dst = [], []
    for i in range(N):
        for j in range(i + 1, N):
            if rng.random() < (0.2 if labels[i] == labels[j] else 0.01):
                src += [i, j]
                dst += [j, i]
    perm = rng.permutation(N)
    return dict(features=features, labels=labels.astype(np.int64), edge_index=np.array([src, dst], dtype=np.int64),
                train_idx=np.sort(perm[:15]), val_idx=np.sort(perm[15:30]), test_idx=np.sort(perm[30:]))


def write_graph(path, **changes) -> str:
    np.savez(path, **(graph_arrays() | changes))
    return str(path)


def config(graph: str, **train) -> dict:
    """The paper's recipe, scaled down: Adam with coupled L2, best val accuracy, the authors' patience rule."""
    return {"model": {"family": "gat", "d_model": 8, "n_heads": 2, "dropout": 0.3, "attention_dropout": 0.3},
            "data": {"task": "graph", "train": graph},
            "train": {"seed": 0, "device": "cpu", "optimizer": "adam", "lr": 0.02, "betas": [0.9, 0.999],
                      "weight_decay": 5e-4, "schedule": "constant", "warmup": 0, "label_smoothing": 0.0,
                      "clip_norm": 0.0, "max_steps": 60, "valid_every": 1, "log_every": 20,
                      "early_stopping": "accuracy", "patience": 20, "patience_metrics": ["accuracy", "loss"],
                      "save_every": 0, **train}}


def write(tmp_path, cfg: dict, name: str = "cfg.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def summary(out: str) -> dict:
    return json.loads(next(line for line in out.splitlines() if line.startswith("result "))[len("result "):])


def test_train_evaluate_and_plot(tmp_path, capsys):
    graph, run_dir = write_graph(tmp_path / "g.npz"), tmp_path / "run"
    assert main(["train", write(tmp_path, config(graph)), "--run-dir", str(run_dir), "--threads", "1"]) == 0
    result = summary(capsys.readouterr().out)
    assert result["test_accuracy"] >= 80.0  # chance is 33%
    run = load_run(run_dir)
    assert (run.cfg.model.n_features, run.cfg.model.n_classes) == (F_IN, C) and run.src_tok is None
    cm = tmp_path / "cm.png"
    assert main(["evaluate", str(run_dir), "--confusion", str(cm)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"accuracy = {result['test_accuracy']:.2f}   macro-F1 = {result['test_macro_f1']:.2f}")
    assert "30 test nodes" in out and cm.stat().st_size > 0
    assert main(["evaluate", str(run_dir), "--split", "val"]) == 0  # the kept checkpoint's validation accuracy
    assert capsys.readouterr().out.startswith(f"accuracy = {result['best']:.2f}")
    for args in (["--node", "7"], ["--node", "7", "--layer", "0", "--head", "1"]):
        png = tmp_path / f"node{len(args)}.png"
        assert main(["plot", "attention", str(run_dir), *args, "--out", str(png)]) == 0
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    capsys.readouterr()
    for args, message in ((["--node", "60"], "node 60 is out of range"), (["--text", "hi"], "graph run"),
                          (["--node", "7", "--head", "1"], "layer 1 has 1 head(s)")):
        assert main(["plot", "attention", str(run_dir), *args, "--out", str(tmp_path / "x.png")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and "\n" not in err
    assert main(["classify", str(run_dir), "some text"]) == 2
    assert "data.task=graph" in capsys.readouterr().err


def plain_loop(graph_path: str, steps: int, patience: int) -> tuple[int, int, float, dict]:
    """The recipe written out by hand (as the stand-in loop of bench/gat_recipe.py was).

    Returns the steps taken, the step kept, its test accuracy and its weights.
    """
    g = load_planetoid(graph_path)
    x, structure = g.features.to_sparse().coalesce(), g.edge_index
    torch.manual_seed(0)
    model = GAT(F_IN, C, hidden=4, heads=2, dropout=0.3, attn_dropout=0.3)
    opt = torch.optim.Adam(model.parameters(), lr=0.02, weight_decay=5e-4)
    best_acc, best_loss, waited, kept, kept_step, kept_val = 0.0, float("inf"), 0, None, 0, (float("inf"), -1.0)

    def scores(idx):
        model.eval()
        with torch.no_grad():
            logits = model(x, structure)
        return F.cross_entropy(logits[idx], g.labels[idx]).item(), (logits[idx].argmax(-1) == g.labels[idx]).sum()

    for step in range(1, steps + 1):
        model.train()
        loss = F.cross_entropy(model(x, structure)[g.train_idx], g.labels[g.train_idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        val_loss, val_acc = scores(g.val_idx)
        val_acc = int(val_acc)
        if val_acc > kept_val[1] or (val_acc == kept_val[1] and val_loss < kept_val[0]):
            kept, kept_step, kept_val = {k: v.clone() for k, v in model.state_dict().items()}, step, (val_loss, val_acc)
        if val_acc >= best_acc or val_loss <= best_loss:
            best_acc, best_loss, waited = max(best_acc, val_acc), min(best_loss, val_loss), 0
        else:
            waited += 1
            if waited == patience:
                break
    model.load_state_dict(kept)
    return step, kept_step, 100 * int(scores(g.test_idx)[1]) / g.test_idx.numel(), kept


def test_seqmap_train_keeps_what_a_plain_loop_keeps(tmp_path):
    """Same seed, same recipe: the trainer's kept step, its weights and the test accuracy equal a hand-written loop."""
    graph = write_graph(tmp_path / "g.npz")
    cfg = from_dict(RunConfig, config(graph, max_steps=400, patience=10))
    result = train(cfg, tmp_path / "run", stream=open(tmp_path / "log.txt", "w"), test=_test)
    steps, kept_step, test_acc, weights = plain_loop(graph, 400, 10)
    best = checkpoint_manager.CheckpointManager(tmp_path / "run").best()
    assert result["step"] == steps < 400 and "train.patience" in result["stop_reason"]
    assert best.name == f"step-{kept_step:06d}"
    assert result["test"]["accuracy"] == pytest.approx(test_acc, abs=1e-9)
    model = GAT(F_IN, C, hidden=4, heads=2)
    load_checkpoint(best, model=model)
    for name, value in model.state_dict().items():
        assert torch.allclose(value, weights[name], atol=1e-6), name


def _test(trainer):
    from seqmap.evaluation import evaluate_test_split

    return evaluate_test_split(trainer)


def test_resume_continues_exactly(tmp_path, capsys):
    graph = write_graph(tmp_path / "g.npz")
    whole, half = tmp_path / "whole", tmp_path / "half"
    cfg = config(graph, max_steps=24, patience=0)
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(whole)]) == 0
    assert main(["train", write(tmp_path, cfg), "--run-dir", str(half), "--train.max_steps", "12"]) == 0
    assert checkpoint_manager.CheckpointManager(half).latest().name == "step-000012"  # the last is always saved
    assert main(["train", "--resume", str(half), "--train.max_steps=24"]) == 0
    capsys.readouterr()
    a, b = (load_run(run, "last").model.state_dict() for run in (whole, half))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_save_every_zero_writes_improvements_and_the_last_only(tmp_path, monkeypatch):
    graph = write_graph(tmp_path / "g.npz")
    saved, save = [], checkpoint_manager.CheckpointManager.save

    def counting(self, step, **kwargs):
        saved.append(step)
        return save(self, step, **kwargs)

    monkeypatch.setattr(checkpoint_manager.CheckpointManager, "save", counting)
    log = open(tmp_path / "log.txt", "w")
    train(from_dict(RunConfig, config(graph, max_steps=40, patience=0)), tmp_path / "zero", stream=log)
    assert saved[-1] == 40 and 1 <= len(saved) < 40 and saved == sorted(set(saved))
    saved.clear()
    train(from_dict(RunConfig, config(graph, max_steps=40, patience=0, save_every=1)), tmp_path / "all", stream=log)
    assert saved == list(range(1, 41))


def test_patience_metrics_restart_the_count_when_any_reaches_its_best(tmp_path):
    """On 15 validation nodes the accuracy stalls early while the loss still falls: [accuracy, loss] trains on."""
    graph, log = write_graph(tmp_path / "g.npz"), open(tmp_path / "log.txt", "w")
    strict = train(from_dict(RunConfig, config(graph, max_steps=300, patience=5, patience_metrics=[])),
                   tmp_path / "strict", stream=log)
    either = train(from_dict(RunConfig, config(graph, max_steps=300, patience=5)), tmp_path / "either", stream=log)
    assert "no better accuracy in 5 validations" in strict["stop_reason"]
    assert either["step"] > strict["step"]


def test_the_dense_form_trains_too(tmp_path):
    graph = write_graph(tmp_path / "g.npz")
    cfg = config(graph, max_steps=30)
    cfg["model"]["graph_attention"] = "dense"
    result = train(from_dict(RunConfig, cfg), tmp_path / "run", stream=open(tmp_path / "log.txt", "w"), test=_test)
    assert result["test"]["accuracy"] > 50.0


@pytest.mark.parametrize("changes, message", [
    ({"edge_index": np.array([[0, 1], [1, 60]])}, "edge_index holds node id 60 but there are 60 nodes"),
    ({"labels": np.full(N, -2)}, "labels hold -2"),
    ({"test_idx": np.array([59, 60])}, "test_idx holds node id 60 but there are 60 nodes"),
    ({"val_idx": np.array([], dtype=np.int64)}, "val_idx is empty"),
])
def test_a_bad_graph_is_one_line_naming_the_problem(tmp_path, capsys, changes, message):
    cfg = write(tmp_path, config(write_graph(tmp_path / "g.npz", **changes)))
    assert main(["train", cfg, "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_missing_graph_file_is_one_line(tmp_path, capsys):
    assert main(["train", write(tmp_path, config(str(tmp_path / "nope.npz"))), "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "nope.npz: no such file" in err and "\n" not in err


@pytest.mark.parametrize("section, changes, message", [
    ("model", {"family": "transformer"}, "model.family=gat and data.task=graph go together"),
    ("data", {"train": None}, "set data.train"),
    ("data", {"valid": "v.npz"}, "set data.train (and not data.valid / data.test)"),
    ("train", {"accum_steps": 2}, "train.accum_steps must be 1"),
    ("train", {"early_stopping": "bleu"}, "is not measured for classification (data.task=graph)"),
    ("train", {"patience_metrics": ["acuracy"]}, "train.patience_metrics = 'acuracy' is not valid"),
    ("train", {"save_every": -1}, "train.save_every must be >= 0"),
    ("model", {"out_heads": 0}, "model.out_heads must be > 0"),
    ("model", {"graph_attention": "csr"}, "model.graph_attention = 'csr' is not valid"),
    ("model", {"d_model": 9}, "must be divisible by model.n_heads"),
])
def test_graph_config_mistakes_are_one_line(section, changes, message):
    cfg = config("g.npz")
    cfg[section] |= changes
    with pytest.raises(ConfigError, match=None) as err:
        from_dict(RunConfig, cfg)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_evaluate_on_another_graph_or_a_missing_one_is_one_line(tmp_path, capsys):
    graph, run_dir = write_graph(tmp_path / "g.npz"), tmp_path / "run"
    assert main(["train", write(tmp_path, config(graph, max_steps=2)), "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    rng = np.random.default_rng(1)
    wider = write_graph(tmp_path / "wider.npz", features=rng.random((N, F_IN + 1)).astype(np.float32))
    no_test = write_graph(tmp_path / "no_test.npz", test_idx=np.array([], dtype=np.int64))
    (tmp_path / "g.npz").rename(tmp_path / "moved.npz")
    for args, message in [
        (["--data", wider], f"wider.npz has {F_IN + 1} features and {C} classes, but the run was trained on {F_IN} "
                            f"and {C}; give the run's graph"),
        (["--data", no_test], "no_test.npz: test_idx is empty; there are no test nodes to evaluate"),
        (["--data", str(tmp_path / "nope.npz")], "nope.npz: no such file"),
        ([], "(or give the graph with --data GRAPH.npz)"),  # the run's data.train has moved
    ]:
        assert main(["evaluate", str(run_dir), *args]) == 2, args
        captured = capsys.readouterr()
        assert captured.out == "" and message in captured.err and captured.err.count("\n") == 1, captured.err
    assert main(["evaluate", str(run_dir), "--data", str(tmp_path / "moved.npz"), "--split", "train"]) == 0
    assert "15 train nodes of moved" in capsys.readouterr().out
