"""The two-layer GAT: shapes, equivariance to node ids, the two forms, gradients, and that it learns."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from seqmap.config import ConfigError, ModelConfig
from seqmap.data.graphs import Graph, add_self_loops
from seqmap.models.builder import build_model
from seqmap.models.gat import GAT

N, FIN, C = 12, 7, 3


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """torch.testing.assert_close without its first-call import of torch.distributed (3 s)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), f"max |diff| {(actual - expected).abs().max()}"


def _graph(seed: int = 0) -> Graph:
    """A ring of N nodes plus a few chords, self-loops, random features; labels in runs of 4 along the ring."""
    g = torch.Generator().manual_seed(seed)
    ring = torch.stack([torch.arange(N), (torch.arange(N) + 1) % N])
    chords = torch.tensor([[0, 6], [2, 9], [4, 11]]).T
    pairs = torch.cat([ring, chords], dim=1)
    edges = add_self_loops(torch.cat([pairs, pairs.flip(0)], dim=1), N)
    idx = torch.arange(N)
    return Graph(torch.randn(N, FIN, generator=g), idx // 4, edges, idx[:6], idx[6:9], idx[9:])


def _model(**kw) -> GAT:
    return GAT(FIN, C, hidden=4, heads=3, **kw)


def test_shapes_and_weights_per_layer():
    g = _graph()
    model = _model(out_heads=2).eval()
    logits, (w1, w2) = model.attention(g.features, g.edge_index)
    assert torch.equal(model(g.features, g.edge_index), logits)
    assert logits.shape == (N, C)
    assert w1.shape == (g.num_edges, 3) and w2.shape == (g.num_edges, 2)


def test_output_is_equivariant_to_permuting_node_ids():
    g = _graph()
    perm = torch.randperm(N, generator=torch.Generator().manual_seed(1))
    model = _model().eval()
    p = g.permuted(perm)
    assert not torch.equal(p.edge_index, g.edge_index)
    for form in (lambda graph: graph.edge_index, Graph.adjacency_mask):
        out = model(g.features, form(g))
        out_p = model(p.features, form(p))
        assert_close(out_p, out[perm], atol=1e-5, rtol=0)
    assert torch.equal(p.labels, g.labels[perm])


def test_dense_and_sparse_forms_agree():
    g = _graph()
    model = _model().eval()
    assert_close(model(g.features, g.adjacency_mask()), model(g.features, g.edge_index),
                               atol=1e-5, rtol=1e-5)


def test_every_parameter_gets_a_finite_gradient():
    g = _graph()
    model = _model()
    logits = model(g.features, g.edge_index)
    F.cross_entropy(logits[g.train_idx], g.labels[g.train_idx]).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_overfits_a_tiny_graph():
    g = _graph()
    model = _model(dropout=0.0, attn_dropout=0.0)
    params = list(model.parameters())
    for _ in range(100):  # plain gradient descent: torch.optim's first optimizer imports torch._dynamo (3-7 s)
        logits = model(g.features, g.edge_index)
        loss = F.cross_entropy(logits, g.labels)
        with torch.no_grad():
            for p, grad in zip(params, torch.autograd.grad(loss, params), strict=True):
                p -= 1.0 * grad
    assert loss.item() < 0.01
    assert (logits.argmax(-1) == g.labels).all()


def test_the_builder_makes_the_gat_of_the_config_and_names_missing_sizes():
    """``build_model`` for ``family: gat``: n_heads heads of d_model / n_heads features, out_heads output heads;
    the sizes ``seqmap train`` sets from the graph are one line naming the option when missing."""
    cfg = dict(family="gat", d_model=12, n_heads=3, out_heads=2, dropout=0.0, attention_dropout=0.0)
    model = build_model(ModelConfig(n_features=FIN, n_classes=C, **cfg)).eval()
    assert isinstance(model, GAT)
    g = _graph()
    logits, (w1, w2) = model.attention(g.features, g.edge_index)
    assert logits.shape == (N, C) and w1.shape == (g.num_edges, 3) and w2.shape == (g.num_edges, 2)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in GAT(
        FIN, C, hidden=4, heads=3, out_heads=2).parameters())
    with pytest.raises(ConfigError, match=r"model.n_features must be set \(> 0\)"):
        build_model(ModelConfig(n_classes=C, **cfg))
    with pytest.raises(ConfigError, match="model.n_classes must be at least 2 .*, got 1"):
        build_model(ModelConfig(n_features=FIN, n_classes=1, **cfg))
