"""A GAT node's neighbourhood attention: the right neighbours, weights summing to 1, the same in both forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqmap.data.graphs import Graph, GraphData, add_self_loops
from seqmap.models.gat import GAT
from seqmap.visualize.graph_attention import node_attention, select_heads

N = 10


def _data() -> GraphData:
    ring = torch.stack([torch.arange(N), (torch.arange(N) + 1) % N])
    edges = add_self_loops(torch.cat([ring, ring.flip(0), torch.tensor([[0], [5]])], dim=1), N)  # 0 -> 5 one way
    idx = torch.arange(N)
    return GraphData(Graph(torch.rand(N, 6, generator=torch.Generator().manual_seed(0)), idx % 2, edges,
                           idx[:4], idx[4:7], idx[7:]))


@pytest.mark.parametrize("form", ["sparse", "dense"])
def test_neighbours_and_weights_of_a_node(form):
    data = _data()
    torch.manual_seed(0)
    model = GAT(6, 2, hidden=4, heads=3, out_heads=2).eval()
    neighbours, per_layer, predicted = node_attention(model, data.features, data.structure(form), 5)
    assert sorted(neighbours.tolist()) == [0, 4, 5, 6]  # ring neighbours, itself, and the one-way edge from 0
    assert [w.shape for w in per_layer] == [(4, 3), (4, 2)]
    for w in per_layer:
        assert np.allclose(w.sum(axis=0), 1.0, atol=1e-6)
    assert predicted.shape == (N,)
    assert 5 not in node_attention(model, data.features, data.structure(form), 0)[0]  # 5 does not feed 0


def test_the_two_forms_give_the_same_weights():
    data = _data()
    torch.manual_seed(0)
    model = GAT(6, 2, hidden=4, heads=3).eval()
    sparse, dense = (node_attention(model, data.features, data.structure(f), 3) for f in ("sparse", "dense"))
    order_s, order_d = np.argsort(sparse[0]), np.argsort(dense[0])
    assert np.array_equal(sparse[0][order_s], dense[0][order_d])
    for ws, wd in zip(sparse[1], dense[1], strict=True):
        assert np.allclose(ws[order_s], wd[order_d], atol=1e-6)


def test_head_selection():
    per_layer = [np.array([[0.2, 0.6], [0.8, 0.4]]), np.array([[0.3], [0.7]])]
    panels, titles = select_heads(per_layer, None, None)
    assert np.allclose(panels[0], [0.4, 0.6]) and np.allclose(panels[1], [0.3, 0.7])
    assert titles == ["layer 0, mean of 2 heads", "layer 1, mean of 1 head"]
    panels, titles = select_heads(per_layer, 0, 1)
    assert np.allclose(panels[0], [0.6, 0.4]) and titles == ["layer 0, head 1"]
    with pytest.raises(ValueError, match="layer 1 has 1 head"):
        select_heads(per_layer, None, 1)
    with pytest.raises(ValueError, match="layer 2 is out of range"):
        select_heads(per_layer, 2, None)


def _run(model, form: str = "sparse"):
    """What plot_node_attention reads of a loaded graph run."""
    from types import SimpleNamespace

    return SimpleNamespace(model=model, device=torch.device("cpu"),
                           cfg=SimpleNamespace(model=SimpleNamespace(graph_attention=form)))


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_label() == "graph attention"]


@pytest.mark.parametrize("form", ["sparse", "dense"])
def test_plot_node_attention_draws_a_panel_per_layer_or_one(tmp_path, form):
    from seqmap.visualize import plot_node_attention

    data = _data()
    torch.manual_seed(0)
    run = _run(GAT(6, 2, hidden=4, heads=3, out_heads=2), form)
    fig = plot_node_attention(run, data, 5, tmp_path / "all.png")
    assert (tmp_path / "all.png").stat().st_size > 0
    assert [ax.get_title() for ax in _panels(fig)] == ["layer 0, mean of 3 heads", "layer 1, mean of 2 heads"]
    assert fig.get_suptitle().startswith("node 5 (gold class 1, predicted ")
    assert fig.get_suptitle().endswith("attention over its 4 in-neighbours (self-loop included)")
    one = plot_node_attention(run, data, 5, tmp_path / "one.svg", layer=0, head=1, title="mine")
    assert [ax.get_title() for ax in _panels(one)] == ["layer 0, head 1"] and one.get_suptitle() == "mine"
    assert (tmp_path / "one.svg").read_text().lstrip().startswith("<?xml")


def test_plot_node_attention_errors_name_the_node(tmp_path):
    from seqmap.visualize import plot_node_attention

    edges = torch.tensor([[0, 1, 2], [3, 3, 0]])  # node 3 attends 0 and 1 but has no self-loop; 1 has no in-edge
    idx = torch.arange(4)
    data = GraphData(Graph(torch.rand(4, 6), idx % 2, edges, idx[:2], idx[2:3], idx[3:], name="tiny"))
    run = _run(GAT(6, 2, hidden=4, heads=2))
    with pytest.raises(ValueError, match=r"node 4 is out of range: tiny has 4 nodes \(ids 0..3\)"):
        plot_node_attention(run, data, 4, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"node 1 has no incoming edge \(not even a self-loop\): nothing to plot"):
        plot_node_attention(run, data, 1, tmp_path / "x.png")
    with pytest.raises(ValueError, match=r"x.jpg: the plot format comes from the file suffix; use one of .png, .svg"):
        plot_node_attention(run, data, 3, tmp_path / "x.jpg")
    fig = plot_node_attention(run, data, 3, tmp_path / "x.png")  # no self weight: the centre has no ring
    assert "its 2 in-neighbours" in fig.get_suptitle() and not (tmp_path / "x.jpg").exists()
