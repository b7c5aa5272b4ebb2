"""Cora and CiteSeer from the original Planetoid files (``ind.NAME.{x,y,tx,ty,allx,ally,graph,test.index}``).

The files are Python 2 pickles (scipy sparse matrices, numpy arrays, a dict of adjacency lists) and a
text file of test node ids. Pickles can run code when loaded, so they are read with
:class:`RestrictedUnpickler`, which builds only the few numpy / scipy.sparse / collections classes
these files hold and refuses anything else; plain ``pickle.load`` is never called on them.

The conversion is the standard one (Kipf's ``gcn/utils.py`` ``load_data``, which the GAT authors copy),
as ``../shared/data/README.md`` section 7 describes it, into the arrays of ``seqmap/data/graphs.py``:

- ``features = vstack(allx, tx)``, ``labels = argmax of vstack(ally, ty)``, the test rows moved to the
  node ids in ``test.index`` (row k of ``tx`` / ``ty`` is node ``test.index[k]``); test ids missing from
  a gap in ``test.index`` (15 in CiteSeer) get a zero feature row and label -1 (no label, in no split);
- ``train_idx = 0 .. len(y) - 1``, ``val_idx`` the next 500 ids, ``test_idx`` the sorted ``test.index``;
- ``edge_index`` from the adjacency lists: self-loops dropped, made symmetric, duplicates dropped,
  columns sorted by (source, target).

:func:`array_digest` fingerprints the converted arrays; ``PLANETOID_ARRAYS_SHA256`` holds the digests of
the standard conversion (of ``../shared/data/planetoid/*.npz``), so a download is checked end to end.
"""

from __future__ import annotations

import hashlib
import io
import pickle
from collections import defaultdict

import numpy as np

from seqmap.data.dataset_files import ChecksumError, DatasetError
from seqmap.data.graphs import KEYS

PLANETOID_PARTS = ("x", "y", "tx", "ty", "allx", "ally", "graph", "test.index")
VAL_SIZE = 500  # the Planetoid split: 500 validation nodes after the training nodes

# name -> array_digest of the standard conversion (the arrays of ../shared/data/planetoid/NAME.npz)
PLANETOID_ARRAYS_SHA256 = {
    "cora": "c5ff63f64b5e13d69ec3fc14965722f29df5bbe39aa6bd33bd40b4e8869d49a5",
    "citeseer": "5630b838365a4c3ceec3dac53d835bc473e7e94ddc5108add3608f1c3a2c88e4",
}


def _allowed() -> dict[tuple[str, str], object]:
    """(module, name) -> the object a Planetoid pickle may build; old (Python 2, numpy 1) and new paths."""
    import codecs
    import copyreg

    import scipy.sparse

    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's array _reconstruct, wherever it lives
    allowed = {
        ("copy_reg", "_reconstructor"): copyreg._reconstructor,
        ("copyreg", "_reconstructor"): copyreg._reconstructor,
        ("__builtin__", "object"): object,
        ("builtins", "object"): object,
        ("__builtin__", "list"): list,
        ("builtins", "list"): list,
        ("collections", "defaultdict"): defaultdict,
        ("_codecs", "encode"): codecs.encode,  # how Python 3 pickles bytes at protocols 0-2 (a pure function)
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        allowed[(module, "_reconstruct")] = reconstruct
    for module in ("scipy.sparse.csr", "scipy.sparse._csr"):
        allowed[(module, "csr_matrix")] = scipy.sparse.csr_matrix
    for module in ("scipy.sparse.lil", "scipy.sparse._lil"):
        allowed[(module, "lil_matrix")] = scipy.sparse.lil_matrix
    return allowed


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles only numpy arrays, scipy.sparse CSR / LIL matrices, lists and defaultdicts (Python 2 str: latin1)."""

    def __init__(self, data: bytes, where: str):
        super().__init__(io.BytesIO(data), encoding="latin1")
        self.where = where
        self.allowed = _allowed()

    def find_class(self, module: str, name: str):
        try:
            return self.allowed[(module, name)]
        except KeyError:
            raise DatasetError(f"{self.where}: the pickle asks for {module}.{name}, which a Planetoid file never "
                               "holds; refusing to load it (is it the original ind.* file?)") from None


def load_pickle(data: bytes, where: str):
    """One Planetoid pickle, through :class:`RestrictedUnpickler`; a broken file raises DatasetError."""
    try:
        return RestrictedUnpickler(data, where).load()
    except DatasetError:
        raise
    except Exception as err:  # a truncated or corrupt pickle raises almost anything
        raise DatasetError(f"{where}: not a readable Planetoid pickle ({type(err).__name__}: {err}); "
                           "fetch the file again") from None


def _dense(matrix, where: str) -> np.ndarray:
    if hasattr(matrix, "toarray"):
        matrix = matrix.toarray()
    if not isinstance(matrix, np.ndarray) or matrix.ndim != 2:
        raise DatasetError(f"{where}: expected a 2-D matrix, got {type(matrix).__name__}")
    return matrix


def planetoid_arrays(files: dict[str, bytes], name: str) -> dict[str, np.ndarray]:
    """The graph arrays (``seqmap/data/graphs.py`` format) from the eight ``ind.NAME.*`` files' contents.

    ``files`` maps each file name (``ind.cora.x``, ..., ``ind.cora.test.index``) to its bytes.
    """
    part = {p: f"ind.{name}.{p}" for p in PLANETOID_PARTS}
    missing = [f for f in part.values() if f not in files]
    if missing:
        raise DatasetError(f"{name}: missing Planetoid file(s) {', '.join(missing)}")
    loaded = {p: load_pickle(files[f], f) for p, f in part.items() if p != "test.index"}
    x, y, tx, ty, allx, ally = (_dense(loaded[p], part[p]) for p in ("x", "y", "tx", "ty", "allx", "ally"))
    try:
        test_index = np.array([int(line) for line in files[part["test.index"]].decode("ascii").split()],
                              dtype=np.int64)
    except ValueError as err:
        raise DatasetError(f"{part['test.index']}: not a list of node ids, one per line ({err})") from None
    if len(tx) != len(test_index) or len(ty) != len(test_index):
        raise DatasetError(f"{name}: tx has {len(tx)} rows and ty {len(ty)} but test.index lists {len(test_index)} ids")
    lo, hi = int(test_index.min()), int(test_index.max())
    if lo != len(allx):
        raise DatasetError(f"{name}: test ids start at {lo} but allx has {len(allx)} rows; the files do not match")
    n = hi + 1
    features = np.zeros((n, allx.shape[1]), dtype=np.float32)
    onehot = np.zeros((n, ally.shape[1]), dtype=np.float32)
    features[:lo], onehot[:lo] = allx, ally
    features[test_index], onehot[test_index] = tx, ty  # row k of tx / ty is node test_index[k]
    labels = np.where(onehot.any(axis=1), onehot.argmax(axis=1), -1).astype(np.int64)
    return {
        "features": features,
        "labels": labels,
        "edge_index": _edges(loaded["graph"], n, part["graph"]),
        "train_idx": np.arange(len(y), dtype=np.int64),
        "val_idx": np.arange(len(y), len(y) + VAL_SIZE, dtype=np.int64),
        "test_idx": np.sort(test_index),
    }


def _edges(graph, n: int, where: str) -> np.ndarray:
    """(2, E) int64 from {node: [neighbours]}: no self-loops, symmetric, no duplicates, sorted by (source, target)."""
    if not isinstance(graph, dict):
        raise DatasetError(f"{where}: expected a dict of adjacency lists, got {type(graph).__name__}")
    pairs = np.array([(int(i), int(j)) for i, neighbours in graph.items() for j in neighbours], dtype=np.int64)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise DatasetError(f"{where}: node id {int(pairs.max())} is beyond the {n} nodes of the features")
    both = np.unique(np.concatenate([pairs, pairs[:, ::-1]]), axis=0)  # unique sorts rows: (source, target)
    return np.ascontiguousarray(both.T)


def array_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over the graph arrays (each key's name, dtype, shape and bytes, in the format's key order)."""
    digest = hashlib.sha256()
    for key in KEYS:
        a = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.tobytes())
    return digest.hexdigest()


def verified_planetoid_npz(files: dict[str, bytes], name: str) -> bytes:
    """The converted graph as .npz bytes, after checking its arrays against ``PLANETOID_ARRAYS_SHA256``."""
    arrays = planetoid_arrays(files, name)
    actual, expected = array_digest(arrays), PLANETOID_ARRAYS_SHA256[name]
    if actual != expected:
        raise ChecksumError(f"{name}: the converted Planetoid arrays have digest {actual}, expected {expected}; "
                            "the ind.* files are not the standard ones (fetch them again)")
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()
