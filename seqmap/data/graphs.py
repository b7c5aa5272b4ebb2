"""Graphs for node classification: one ``.npz`` per graph read into a typed :class:`Graph`.

The format (the one ``../shared/data/planetoid/*.npz`` use; ``numpy.load(path, allow_pickle=False)``):

==============  =========  ==========================================================================
key             dtype      meaning
==============  =========  ==========================================================================
``features``    float      (N, F) node features
``labels``      integer    (N,) class ids 0..C-1; -1 marks an unlabelled node (in no split)
``edge_index``  integer    (2, E) row 0 sources, row 1 destinations; an undirected edge appears twice
``train_idx``   integer    node ids of the training nodes (likewise ``val_idx``, ``test_idx``)
==============  =========  ==========================================================================

Reading follows the GAT paper (Velickovic et al. 2018) and the authors' code: features are
row-normalised (each row divided by its sum; all-zero rows stay zero) and every node gets one
self-loop (existing self-loops are dropped first, so none is doubled). Both are options, on by default.

Every bad input raises :class:`GraphError` with one line naming the file, the problem and the fix.

Training (``data.task: graph``) is full-batch and transductive: :class:`GraphData` turns the whole graph
into one :class:`~seqmap.data.batching.LabelBatch` per pass, scored on one split's nodes. The batch
carries the structure where a text batch carries its mask (``model(batch.src, batch.src_mask)``):

- ``src``: (N, F) node features, a sparse COO tensor (bag-of-words rows are ~1% non-zero);
- ``src_mask``: the graph, in the form the model's attention takes (``model.graph_attention``): the
  (2, E) edge index (sparse; the True entries of the mask, as (source j, destination i)) or the
  (N, N) boolean mask itself (dense; ``mask[i, j]`` True = node i may attend node j);
- ``labels``: (N,) the class of each node of the split, ``NOT_SCORED`` elsewhere.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from seqmap.data.batching import NOT_SCORED, LabelBatch
from seqmap.data.dataset_files import DatasetError
from seqmap.nn.graph_attention import adjacency_mask

KEYS = ("features", "labels", "edge_index", "train_idx", "val_idx", "test_idx")
SPLITS = ("train_idx", "val_idx", "test_idx")

# The standard Planetoid split (Yang et al. 2016) as converted in ../shared/data/README.md, section 7:
# name -> SHA-256 of the .npz, for a registry entry.
PLANETOID_SHA256 = {
    "cora": "064325ff9414b428fb18e352e11a8041406c8994cd38e0d73b1ef4ffa9a00949",
    "citeseer": "155bfc4f8a00720fc9f979cf62bef754fe05d0e72a46705c826ea2c3d808223e",
}
DEFAULT_PLANETOID_DIR = Path("data/planetoid")


class GraphError(DatasetError):
    """A graph file is missing, unreadable or inconsistent; the message says what to change."""


@dataclass(frozen=True)
class Graph:
    """One graph, its node features and labels, and the transductive split (node ids).

    Attributes:
        features: (N, F) float32.
        labels: (N,) int64, class ids 0..C-1, -1 for an unlabelled node.
        edge_index: (2, E) int64, row 0 sources j, row 1 destinations i (node i attends node j);
            sorted by (destination, source); self-loops included when added.
        train_idx, val_idx, test_idx: int64 node ids.
        name: where the graph came from, for messages.
    """

    features: Tensor
    labels: Tensor
    edge_index: Tensor
    train_idx: Tensor
    val_idx: Tensor
    test_idx: Tensor
    name: str = "graph"

    @property
    def num_nodes(self) -> int:
        return self.features.size(0)

    @property
    def num_features(self) -> int:
        return self.features.size(1)

    @property
    def num_classes(self) -> int:
        return int(self.labels.max()) + 1

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1)

    def adjacency_mask(self) -> Tensor:
        """(N, N) bool, ``mask[i, j]`` True = node i may attend node j: the dense form's mask."""
        return adjacency_mask(self.edge_index, self.num_nodes)

    def permuted(self, perm: Tensor) -> Graph:
        """The same graph with node ``perm[k]`` renamed ``k`` (features row k = old row perm[k])."""
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        return Graph(self.features[perm], self.labels[perm], _sorted_edges(inverse[self.edge_index]),
                     inverse[self.train_idx], inverse[self.val_idx], inverse[self.test_idx], self.name)


GRAPH_FORMS = ("sparse", "dense")  # how a batch carries the structure: edge index | (N, N) mask


@dataclass
class GraphData:
    """One graph ready for full-batch training: its features as sparse COO, its structure in either form."""

    graph: Graph
    features: Tensor = field(init=False, repr=False)
    _structures: dict[str, Tensor] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.features = self.graph.features.to_sparse().coalesce()

    @property
    def class_names(self) -> list[str]:
        """The classes as the .npz numbers them ("0", "1", ...): the format stores no names."""
        return [str(c) for c in range(self.graph.num_classes)]

    def structure(self, form: str) -> Tensor:
        """The (2, E) edge index (``sparse``) or the (N, N) boolean mask (``dense``), built once per form."""
        if form not in GRAPH_FORMS:
            raise ValueError(f"graph form {form!r} is not one of {GRAPH_FORMS}")
        if form not in self._structures:
            self._structures[form] = self.graph.edge_index if form == "sparse" else self.graph.adjacency_mask()
        return self._structures[form]

    def batch(self, nodes: Tensor, form: str = "sparse") -> LabelBatch:
        """The whole graph as one :class:`LabelBatch` scored on ``nodes`` (see the module docstring)."""
        labels = torch.full_like(self.graph.labels, NOT_SCORED)
        labels[nodes] = self.graph.labels[nodes]
        return LabelBatch(self.features, self.structure(form), labels, int(nodes.numel()))


def _sorted_edges(edge_index: Tensor) -> Tensor:
    n = int(edge_index.max()) + 1 if edge_index.numel() else 1
    order = torch.argsort(edge_index[1] * n + edge_index[0])
    return edge_index[:, order]


def add_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Drop existing self-loops and duplicate edges, add one loop per node, sort by (destination, source)."""
    loops = torch.arange(num_nodes).repeat(2, 1)
    edges = torch.cat([edge_index[:, edge_index[0] != edge_index[1]], loops], dim=1)
    return _sorted_edges(torch.unique(edges, dim=1))


def row_normalize(features: Tensor) -> Tensor:
    """Each row divided by its sum (GCN's and GAT's ``preprocess_features``); all-zero rows stay zero."""
    sums = features.sum(dim=1, keepdim=True)
    return features / torch.where(sums == 0, 1.0, sums)


def _check(arrays: dict[str, np.ndarray], where: str) -> None:
    """Raise GraphError, one line, on the first inconsistency among the arrays."""
    def fail(msg: str) -> None:
        raise GraphError(f"{where}: {msg}")

    missing = [k for k in KEYS if k not in arrays]
    if missing:
        fail(f"missing key(s) {', '.join(missing)} (has {', '.join(sorted(arrays)) or 'none'}); "
             f"save all of {', '.join(KEYS)} with numpy.savez")
    x, y, e = arrays["features"], arrays["labels"], arrays["edge_index"]
    if x.ndim != 2 or x.shape[0] == 0:
        fail(f"features must be a non-empty (N, F) array, got shape {x.shape}; store one row per node")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer) or x.dtype == bool):
        fail(f"features must be numeric, got dtype {x.dtype}; store them as float32")
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        bad = int((~np.isfinite(x)).any(axis=1).sum())
        fail(f"features hold NaN or infinite values in {bad} row(s); replace them (e.g. numpy.nan_to_num)")
    n = x.shape[0]
    if y.shape != (n,):
        fail(f"labels must have shape (N,) = ({n},) to match features' {n} rows, got {y.shape}; "
             "store one class id per node")
    if not np.issubdtype(y.dtype, np.integer):
        fail(f"labels must be integer class ids, got dtype {y.dtype}; store argmax of one-hot rows as int64")
    if y.size and y.min() < -1:
        fail(f"labels hold {int(y.min())}; use class ids 0..C-1 and -1 only for unlabelled nodes")
    if e.ndim != 2 or e.shape[0] != 2:
        fail(f"edge_index must have shape (2, E), got {e.shape}; store sources in row 0, destinations in row 1 "
             "(transpose an (E, 2) edge list)")
    if not np.issubdtype(e.dtype, np.integer):
        fail(f"edge_index must be integer node ids, got dtype {e.dtype}; store it as int64")
    if e.size and (e.min() < 0 or e.max() >= n):
        bad = int(e.min()) if e.min() < 0 else int(e.max())
        fail(f"edge_index holds node id {bad} but there are {n} nodes (ids 0..{n - 1}); "
             "fix the edge ids or add the missing feature rows")
    seen: dict[int, str] = {}
    for key in SPLITS:
        idx = arrays[key]
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
            fail(f"{key} must be a 1-D integer array of node ids, got shape {idx.shape}, dtype {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
            fail(f"{key} holds node id {bad} but there are {n} nodes (ids 0..{n - 1}); fix the split")
        if idx.size and (y[idx] < 0).any():
            fail(f"{key} holds unlabelled node {int(idx[y[idx] < 0][0])} (label -1); drop it from the split "
                 "or give it a label")
        for i in idx.tolist():
            if i in seen:
                fail(f"node {i} is in both {seen[i]} and {key}; the splits must be disjoint")
            seen[i] = key
    if arrays["train_idx"].size == 0:
        fail("train_idx is empty; list the labelled training nodes")


def graph_from_arrays(
    arrays: dict[str, np.ndarray],
    *,
    name: str = "graph",
    normalize_features: bool = True,
    self_loops: bool = True,
) -> Graph:
    """A :class:`Graph` from the format's arrays, checked (see the module docstring for options)."""
    _check(arrays, name)
    features = torch.as_tensor(np.asarray(arrays["features"], dtype=np.float32))
    if normalize_features:
        features = row_normalize(features)
    edge_index = torch.as_tensor(arrays["edge_index"].astype(np.int64))
    edge_index = add_self_loops(edge_index, features.size(0)) if self_loops else _sorted_edges(edge_index)
    split = [torch.as_tensor(arrays[k].astype(np.int64)) for k in SPLITS]
    return Graph(features, torch.as_tensor(arrays["labels"].astype(np.int64)), edge_index, *split, name=name)


def read_graph(path: str | Path, *, normalize_features: bool = True, self_loops: bool = True) -> Graph:
    """Read and check one graph ``.npz``; a bad file raises :class:`GraphError` with one line."""
    path = Path(path)
    if not path.is_file():
        raise GraphError(f"{path}: no such file; give the path to a graph .npz (format: seqmap/data/graphs.py)")
    with open(path, "rb") as f:
        if f.read(2) != b"PK":  # numpy would read any other file as a pickle and say so
            raise GraphError(f"{path}: not a .npz file (a .npz is a zip archive of arrays); write the graph with "
                             "numpy.savez (format: seqmap/data/graphs.py)")
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (zipfile.BadZipFile, ValueError, OSError) as err:
        raise GraphError(f"{path}: not a readable .npz ({type(err).__name__}: {err}); "
                         "write it with numpy.savez, without object arrays") from None
    return graph_from_arrays(arrays, name=path.name, normalize_features=normalize_features, self_loops=self_loops)


def load_planetoid(
    name_or_path: str | Path,
    *,
    root: str | Path | None = None,
    normalize_features: bool = True,
    self_loops: bool = True,
) -> Graph:
    """Cora or CiteSeer by name (``ROOT/NAME.npz``, ROOT default ``data/planetoid``), or any graph ``.npz`` by path.

    A name is one of ``PLANETOID_SHA256``'s keys; anything else, or anything ending in ``.npz``, is a path.
    """
    text = str(name_or_path)
    if text.lower() in PLANETOID_SHA256 and not text.endswith(".npz"):
        folder = Path(root) if root is not None else DEFAULT_PLANETOID_DIR
        path = folder / f"{text.lower()}.npz"
        if not path.is_file():
            raise GraphError(f"{path}: no such file; give the .npz path itself, or put {text.lower()}.npz in "
                             f"{folder} (seqmap data prepare {text.lower()} --from DIR --dest {folder})")
    else:
        path = Path(name_or_path)
        if path.is_dir():
            raise GraphError(f"{path} is a directory; give the graph .npz file itself")
        if not path.is_file():
            known = ", ".join(sorted(PLANETOID_SHA256))
            raise GraphError(f"{path}: no such file; give a graph .npz path or one of the names {known}")
    return read_graph(path, normalize_features=normalize_features, self_loops=self_loops)
