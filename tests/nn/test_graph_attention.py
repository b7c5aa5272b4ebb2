"""Invariants of ``seqmap.nn.graph_attention``: neighbour-only weights, the two forms, gradients.

Shapes: N nodes, E edges, H heads, Dh width of one head; edge_index row 0 sources, row 1 destinations.
"""

from __future__ import annotations

import pytest
import torch

from seqmap.data.graphs import add_self_loops
from seqmap.nn.graph_attention import (
    GraphAttention,
    adjacency_mask,
    dense_graph_attention,
    edge_scores,
    edge_weights_to_dense,
    segment_softmax,
    sparse_graph_attention,
)

N, FIN, H, DH = 6, 5, 3, 4


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """torch.testing.assert_close without its first-call import of torch.distributed (3 s)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), f"max |diff| {(actual - expected).abs().max()}"


def _graph(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Features (N, FIN) and a small undirected graph with self-loops; node 5 has only its self-loop."""
    g = torch.Generator().manual_seed(seed)
    pairs = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2], [4, 1]]).T
    edges = add_self_loops(torch.cat([pairs, pairs.flip(0)], dim=1), N)
    return torch.randn(N, FIN, generator=g), edges


def _inputs(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, H, DH, generator=g)
    att_src, att_dst = torch.randn(H, DH, generator=g), torch.randn(H, DH, generator=g)
    return h, *edge_scores(h, att_src, att_dst)


def test_adjacency_mask_reads_edges_as_source_to_destination():
    mask = adjacency_mask(torch.tensor([[0, 2], [1, 1]]), 3)  # edges 0 -> 1 and 2 -> 1
    expected = torch.tensor([[0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_segment_softmax_sums_to_one_per_segment_and_survives_large_scores():
    scores = torch.tensor([[1000.0], [999.0], [-5.0], [3.0], [3.0]])
    w = segment_softmax(scores, torch.tensor([0, 0, 2, 1, 1]), 3)
    assert torch.isfinite(w).all()
    assert_close(w.squeeze(1), torch.tensor([0.7311, 0.2689, 1.0, 0.5, 0.5]), atol=1e-4, rtol=0)


def test_non_neighbours_get_exactly_zero_weight_and_neighbours_sum_to_one():
    _, edges = _graph()
    h, s_src, s_dst = _inputs()
    mask = adjacency_mask(edges, N)
    _, dense_w = dense_graph_attention(h, s_src, s_dst, mask)
    assert (dense_w[:, ~mask] == 0).all()
    assert_close(dense_w.sum(-1), torch.ones(H, N))
    _, sparse_w = sparse_graph_attention(h, s_src, s_dst, edges)
    sums = torch.zeros(N, H).index_add_(0, edges[1], sparse_w)
    assert_close(sums, torch.ones(N, H))
    assert (edge_weights_to_dense(sparse_w, edges, N)[:, ~mask] == 0).all()


def test_isolated_node_attends_only_itself():
    _, edges = _graph()
    h, s_src, s_dst = _inputs()
    out, w = dense_graph_attention(h, s_src, s_dst, adjacency_mask(edges, N))
    assert torch.equal(w[:, 5, 5], torch.ones(H))
    assert_close(out[5], h[5])


def test_node_without_incoming_edges_gets_zero_output_in_both_forms():
    edges = torch.tensor([[0, 1], [1, 0]])  # nodes 2.. have no incoming edge
    h, s_src, s_dst = _inputs()
    dense_out, _ = dense_graph_attention(h, s_src, s_dst, adjacency_mask(edges, N))
    sparse_out, _ = sparse_graph_attention(h, s_src, s_dst, edges)
    assert torch.equal(dense_out[2:], torch.zeros(N - 2, H, DH))
    assert torch.equal(sparse_out[2:], torch.zeros(N - 2, H, DH))


def test_dense_and_sparse_forms_agree():
    _, edges = _graph()
    h, s_src, s_dst = _inputs()
    dense_out, dense_w = dense_graph_attention(h, s_src, s_dst, adjacency_mask(edges, N))
    sparse_out, sparse_w = sparse_graph_attention(h, s_src, s_dst, edges)
    assert_close(sparse_out, dense_out, atol=1e-6, rtol=1e-5)
    assert_close(edge_weights_to_dense(sparse_w, edges, N), dense_w, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("concat", [True, False])
def test_layer_forms_agree_and_every_parameter_gets_a_finite_gradient(concat):
    x, edges = _graph()
    layer = GraphAttention(FIN, DH, H, concat=concat, dropout=0.5, attn_dropout=0.5).eval()
    out_sparse, _ = layer(x, edges)
    out_dense, w = layer(x, adjacency_mask(edges, N))
    assert out_sparse.shape == (N, H * DH if concat else DH)
    assert w.shape == (H, N, N)
    assert_close(out_sparse, out_dense, atol=1e-6, rtol=1e-5)
    layer.train()
    out, _ = layer(x, edges)
    out.square().sum().backward()
    for name, p in layer.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_sparse_features_give_the_dense_result():
    x, edges = _graph()
    x = torch.where(x > 0.5, x, 0.0)
    layer = GraphAttention(FIN, DH, H).eval()
    assert_close(layer(x.to_sparse(), edges)[0], layer(x, edges)[0], atol=1e-6, rtol=1e-5)


def test_bad_structure_and_dropout_say_what_to_pass():
    x, edges = _graph()
    layer = GraphAttention(FIN, DH, H)
    with pytest.raises(ValueError, match=r"dense graph mask must be \(N, N\)"):
        layer(x, torch.ones(N, N + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"edge index must be \(2, E\)"):
        layer(x, edges.T)
    with pytest.raises(ValueError, match="attn_dropout must be in"):
        GraphAttention(FIN, DH, attn_dropout=1.0)


def test_an_int32_edge_index_gives_the_int64_result_and_other_dtypes_are_refused():
    """torch's CPU gather misreads an expanded int32 index: segment weights then summed past 1, silently."""
    x, edges = _graph()
    scores = torch.randn(edges.size(1), H, generator=torch.Generator().manual_seed(1))
    assert_close(segment_softmax(scores, edges[1].int(), N), segment_softmax(scores, edges[1], N))
    layer = GraphAttention(FIN, DH, H).eval()
    out, weights = layer(x, edges.int())
    expected_out, expected_weights = layer(x, edges)
    assert_close(out, expected_out)
    assert_close(weights, expected_weights)
    with pytest.raises(TypeError, match=r"edge index must hold int64 .*edge_index.long\(\)"):
        layer(x, edges.float())
