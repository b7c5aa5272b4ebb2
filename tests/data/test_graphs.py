"""The graph reader: a good file becomes a typed Graph; each bad input gives one clear line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from seqmap.data.graphs import GraphError, add_self_loops, load_planetoid, read_graph, row_normalize

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "planetoid"


def assert_close(actual: torch.Tensor, expected: torch.Tensor, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """torch.testing.assert_close without its first-call import of torch.distributed (3 s)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=atol, rtol=rtol), f"max |diff| {(actual - expected).abs().max()}"


def _arrays(**changes) -> dict[str, np.ndarray]:
    """A 5-node graph in the npz format: path 0-1-2-3, node 4 alone (and unlabelled)."""
    pairs = np.array([[0, 1], [1, 2], [2, 3]]).T
    arrays = dict(
        features=np.array([[1, 1, 0], [0, 2, 2], [1, 0, 0], [0, 0, 0], [3, 0, 1]], dtype=np.float32),
        labels=np.array([0, 1, 0, 1, -1]),
        edge_index=np.concatenate([pairs, pairs[::-1]], axis=1),
        train_idx=np.array([0, 1]),
        val_idx=np.array([2]),
        test_idx=np.array([3]),
    )
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


def _write(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "g.npz"
    np.savez(path, **_arrays(**changes))
    return path


def test_reads_a_good_file(tmp_path):
    g = read_graph(_write(tmp_path))
    assert (g.num_nodes, g.num_features, g.num_classes) == (5, 3, 2)
    assert g.features.dtype == torch.float32 and g.labels.dtype == torch.int64
    assert_close(g.features.sum(1), torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0]))  # zero row stays zero
    assert g.num_edges == 6 + 5  # both directions of 3 edges, one self-loop per node
    assert torch.equal(g.train_idx, torch.tensor([0, 1]))
    mask = g.adjacency_mask()
    assert mask.diagonal().all() and mask[1, 0] and mask[0, 1] and not mask[0, 2]


def test_options_keep_raw_features_and_no_loops(tmp_path):
    g = read_graph(_write(tmp_path), normalize_features=False, self_loops=False)
    assert g.features[1].tolist() == [0.0, 2.0, 2.0]
    assert g.num_edges == 6 and not (g.edge_index[0] == g.edge_index[1]).any()


def test_self_loops_are_not_doubled_and_duplicates_dropped():
    edges = add_self_loops(torch.tensor([[0, 0, 1, 1], [0, 1, 0, 0]]), 2)
    assert edges.tolist() == [[0, 1, 0, 1], [0, 0, 1, 1]]  # sorted by (destination, source)


def test_row_normalize_divides_by_row_sums():
    assert row_normalize(torch.tensor([[1.0, 3.0], [0.0, 0.0]])).tolist() == [[0.25, 0.75], [0.0, 0.0]]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(edge_index=None), r"missing key\(s\) edge_index .* save all of"),
        (dict(edge_index=np.array([[0, 7], [7, 0]])), r"edge_index holds node id 7 but there are 5 nodes \(ids 0..4\)"),
        (dict(edge_index=np.array([[0, -1], [1, 0]])), r"edge_index holds node id -1"),
        (dict(edge_index=np.array([[0, 1], [1, 0], [2, 2]])), r"edge_index must have shape \(2, E\).*transpose"),
        (dict(edge_index=np.zeros((2, 2), dtype=np.float32)), r"edge_index must be integer"),
        (dict(labels=np.array([0, 1, 0])), r"labels must have shape \(N,\) = \(5,\).*got \(3,\)"),
        (dict(labels=np.zeros(5, dtype=np.float32)), r"labels must be integer class ids"),
        (dict(labels=np.array([0, 1, 0, -2, 1])), r"labels hold -2"),
        (dict(features=np.full((5, 3), np.nan, dtype=np.float32)), r"NaN or infinite values in 5 row\(s\)"),
        (dict(features=np.zeros(5, dtype=np.float32)), r"features must be a non-empty \(N, F\) array"),
        (dict(test_idx=np.array([9])), r"test_idx holds node id 9 but there are 5 nodes"),
        (dict(test_idx=np.array([4])), r"test_idx holds unlabelled node 4"),
        (dict(val_idx=np.array([1])), r"node 1 is in both train_idx and val_idx"),
        (dict(train_idx=np.array([], dtype=np.int64)), r"train_idx is empty"),
        (dict(features=np.array([["a"]] * 5)), r"features must be numeric, got dtype <U1; store them as float32"),
        (dict(val_idx=np.array([2.0])), r"val_idx must be a 1-D integer array of node ids, got shape \(1,\), "
                                        r"dtype float64"),
        (dict(val_idx=np.array([[2]])), r"val_idx must be a 1-D integer array"),
    ],
)
def test_each_bad_input_gives_one_clear_line(tmp_path, changes, message):
    with pytest.raises(GraphError, match=message) as err:
        read_graph(_write(tmp_path, **changes))
    text = str(err.value)
    assert "\n" not in text and text.startswith("g.npz: ")


def test_a_graph_batch_scores_only_the_nodes_of_its_split(tmp_path):
    """The whole graph goes in every batch; labels outside the split's nodes are NOT_SCORED, so the loss and the
    accuracy read that split alone. Both structure forms are built once and kept."""
    from seqmap.data.batching import NOT_SCORED
    from seqmap.data.graphs import GraphData

    data = GraphData(read_graph(_write(tmp_path)))
    batch = data.batch(data.graph.val_idx)
    assert batch.labels.tolist() == [NOT_SCORED, NOT_SCORED, 0, NOT_SCORED, NOT_SCORED]
    assert batch.n_tokens == 1 and batch.src is data.features and batch.src_mask is data.graph.edge_index
    assert data.batch(data.graph.train_idx).labels.tolist() == [0, 1, NOT_SCORED, NOT_SCORED, NOT_SCORED]
    dense = data.batch(data.graph.test_idx, "dense")
    assert dense.labels.tolist() == [NOT_SCORED] * 3 + [1, NOT_SCORED]
    mask = data.structure("dense")
    assert mask.dtype == torch.bool and mask.shape == (5, 5) and mask[1, 0] and mask[1, 2] and not mask[0, 2]
    assert data.structure("dense") is mask and data.structure("sparse") is data.graph.edge_index
    assert data.class_names == ["0", "1"]
    assert torch.equal(data.features.to_dense(), data.graph.features)
    with pytest.raises(ValueError, match=r"graph form 'coo' is not one of \('sparse', 'dense'\)"):
        data.structure("coo")


def test_unreadable_or_missing_files(tmp_path):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")  # numpy's own message would say the file holds pickled data
    with pytest.raises(GraphError, match=r"bad.npz: not a .npz file \(a .npz is a zip archive of arrays\); write "
                                         r"the graph with numpy.savez"):
        read_graph(bad)
    bad.write_bytes(b"PK\x03\x04 and then no zip")
    with pytest.raises(GraphError, match=r"bad.npz: not a readable .npz"):
        read_graph(bad)
    with pytest.raises(GraphError, match=r"no such file; give the path"):
        read_graph(tmp_path / "absent.npz")
    with pytest.raises(GraphError, match=r"cora.npz: no such file; give the .npz path itself, or put cora.npz in "
                                         r".* \(seqmap data prepare cora --from DIR --dest .*\)"):
        load_planetoid("cora", root=tmp_path)
    with pytest.raises(GraphError, match=r"is a directory; give the graph .npz file itself"):
        load_planetoid(tmp_path)
    with pytest.raises(GraphError, match=r"one of the names citeseer, cora"):
        load_planetoid("coraa")


def test_load_planetoid_takes_a_path(tmp_path):
    assert load_planetoid(_write(tmp_path)).num_nodes == 5


@pytest.mark.skipif(not (SHARED / "cora.npz").is_file(), reason="shared Planetoid data not present")
def test_cora_as_documented():
    g = load_planetoid("cora", root=SHARED)
    assert (g.num_nodes, g.num_features, g.num_classes) == (2708, 1433, 7)
    assert g.num_edges == 10556 + 2708
    assert (len(g.train_idx), len(g.val_idx), len(g.test_idx)) == (140, 500, 1000)
    assert_close(g.features.sum(1), torch.ones(2708))
