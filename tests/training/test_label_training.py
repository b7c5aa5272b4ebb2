"""Classifiers train through the one Trainer: LabelBatch, label_nll, and a classifier that learns."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from seqmap.config import ModelConfig, TrainConfig
from seqmap.data.batching import NOT_SCORED, collate_labels
from seqmap.models.builder import build_classifier
from seqmap.training.loss import label_nll
from seqmap.training.trainer import Trainer, make_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_label_nll_is_cross_entropy_over_the_scored_rows():
    logits = torch.randn(5, 3)
    labels = torch.tensor([0, 2, NOT_SCORED, 1, NOT_SCORED])
    loss, nll, n = label_nll(logits, labels, smoothing=0.1)
    keep = labels != NOT_SCORED
    assert n == 3
    torch.testing.assert_close(loss, F.cross_entropy(logits[keep], labels[keep], reduction="sum",
                                                     label_smoothing=0.1))
    torch.testing.assert_close(nll, F.cross_entropy(logits[keep], labels[keep], reduction="sum"))


def test_label_nll_names_a_label_outside_the_classes():
    with pytest.raises(ValueError, match=r"class ids in 0\.\.2"):
        label_nll(torch.zeros(2, 3), torch.tensor([0, 3]))
    with pytest.raises(ValueError, match=r"logits \(B, C\) and labels \(B,\)"):
        label_nll(torch.zeros(2, 3), torch.tensor([[0], [1]]))


def test_collate_labels_pads_and_counts_the_scored_labels():
    batch = collate_labels([([4, 5, 6], 1), ([7], 0), ([], NOT_SCORED)])
    assert batch.src.tolist() == [[4, 5, 6], [7, 0, 0], [0, 0, 0]]
    assert batch.src_mask.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert batch.labels.tolist() == [1, 0, NOT_SCORED] and batch.n_tokens == 2


def test_the_one_trainer_trains_a_classifier_on_label_batches():
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab=12, tgt_vocab=12, d_model=16, n_heads=2, d_ff=32, enc_layers=1, dropout=0.0)
    model = build_classifier(cfg, n_classes=2, pooling="mean")
    g = torch.Generator().manual_seed(0)
    examples = []
    for _ in range(64):  # the label: which marker (10 or 11) the text holds, among 3-7 filler tokens
        label = int(torch.randint(0, 2, (1,), generator=g))
        text = torch.randint(4, 10, (int(torch.randint(3, 8, (1,), generator=g)),), generator=g).tolist()
        text.insert(int(torch.randint(0, len(text), (1,), generator=g)), 10 + label)
        examples.append((text, label))
    batches = [collate_labels(examples[i:i + 16]) for i in range(0, 64, 16)]
    t = TrainConfig(lr=3e-3, max_steps=120, warmup=10, schedule="constant", log_every=1000, weight_decay=0.0,
                    label_smoothing=0.0)
    losses = []
    result = Trainer(model, t, torch.device("cpu")).run(
        (batches[i % 4] for i in range(10_000)), on_step=lambda step, loss, lr: losses.append(loss))
    assert result["step"] == 120 and result["stop_reason"] == "reached train.max_steps=120"
    assert losses[-1] < 0.05 < losses[0]
    model.eval()
    every = collate_labels(examples)
    assert torch.equal(model(every.src, every.src_mask).argmax(-1), every.labels)


def test_adam_is_l2_coupled_into_the_gradient_on_every_parameter():
    """train.optimizer=adam: torch's Adam over every parameter with weight_decay (the GAT paper's L2);
    adamw keeps biases out of the decay and decouples it."""
    def one_step(optimizer_name: str) -> nn.Linear:
        torch.manual_seed(0)
        layer = nn.Linear(3, 2)
        opt = make_optimizer(layer, TrainConfig(optimizer=optimizer_name, lr=0.1, weight_decay=0.5,
                                                betas=[0.9, 0.999]), torch.device("cpu"))
        (0.0 * layer(torch.ones(1, 3)).sum()).backward()  # zero gradients: only the decay moves the weights
        opt.step()
        return layer

    torch.manual_seed(0)
    start = nn.Linear(3, 2)
    adam, adamw = one_step("adam"), one_step("adamw")
    assert isinstance(make_optimizer(adam, TrainConfig(optimizer="adam"), torch.device("cpu")), torch.optim.Adam)
    # coupled L2: the gradient is 0.5 * w, so Adam's first step moves every entry by lr * sign(w)
    for before, after in ((start.weight, adam.weight), (start.bias, adam.bias)):
        assert torch.allclose(after, before - 0.1 * before.sign(), atol=1e-6)
    assert torch.equal(adamw.bias, start.bias) and not torch.equal(adamw.weight, start.weight)
