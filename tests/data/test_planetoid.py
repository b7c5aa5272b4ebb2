"""Cora / CiteSeer from the Planetoid pickles (restricted unpickling, the standard conversion) and the registry entries.

The original ``ind.*`` files are not on this machine, so the tests write them from the converted
``.npz`` (the inverse of the conversion, pickled with protocols 0 and 2 as Python 2 and 3 would) and
check that converting them back gives the ``.npz`` arrays exactly, and their recorded digest.
"""

from __future__ import annotations

import os
import pickle
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse

from seqmap.cli import main
from seqmap.data import datasets
from seqmap.data.dataset_files import ChecksumError, DatasetError
from seqmap.data.graphs import PLANETOID_SHA256
from seqmap.data.planetoid import PLANETOID_ARRAYS_SHA256, array_digest, load_pickle, planetoid_arrays

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "planetoid"
pytestmark = pytest.mark.skipif(not (SHARED / "cora.npz").is_file(), reason="shared Planetoid data not present")


def npz_arrays(name: str) -> dict[str, np.ndarray]:
    with np.load(SHARED / f"{name}.npz", allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def ind_files(arrays: dict[str, np.ndarray], name: str, protocol: int, seed: int = 0) -> dict[str, bytes]:
    """The eight ind.NAME.* files whose conversion gives ``arrays`` (test.index in a shuffled order, as upstream)."""
    features, labels, edges = arrays["features"], arrays["labels"], arrays["edge_index"]
    n_classes = int(labels.max()) + 1
    onehot = np.zeros((len(labels), n_classes), dtype=np.int32)
    onehot[labels >= 0, labels[labels >= 0]] = 1  # unlabelled nodes: an all-zero row
    train, test = arrays["train_idx"], arrays["test_idx"]
    test = test[np.random.default_rng(seed).permutation(len(test))]  # row k of tx is node test.index[k]
    first_test = int(arrays["test_idx"].min())
    graph = defaultdict(list)
    for i, j in edges.T.tolist():
        graph[i].append(j)
    parts = {"x": scipy.sparse.csr_matrix(features[train]), "y": onehot[train],
             "allx": scipy.sparse.csr_matrix(features[:first_test]), "ally": onehot[:first_test],
             "tx": scipy.sparse.csr_matrix(features[test]), "ty": onehot[test], "graph": graph}
    files = {f"ind.{name}.{p}": pickle.dumps(v, protocol=protocol) for p, v in parts.items()}
    files[f"ind.{name}.test.index"] = "".join(f"{i}\n" for i in test.tolist()).encode()
    return files


@pytest.mark.parametrize("name", ["cora", "citeseer"])
@pytest.mark.parametrize("protocol", [0, 2])
def test_the_conversion_of_the_pickles_gives_the_npz(name, protocol):
    arrays = npz_arrays(name)
    converted = planetoid_arrays(ind_files(arrays, name, protocol), name)
    assert converted.keys() == arrays.keys()
    for key, value in arrays.items():
        assert converted[key].dtype == value.dtype and np.array_equal(converted[key], value), key
    assert array_digest(converted) == PLANETOID_ARRAYS_SHA256[name]
    if name == "citeseer":  # the 15 ids missing from test.index: zero features, no label, in no split
        assert (converted["labels"] == -1).sum() == 15


def test_download_converts_and_checks_the_arrays(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for file, data in ind_files(npz_arrays("cora"), "cora", 2).items():
        (mirror / file).write_bytes(data)
    dest = datasets.download("cora", tmp_path / "cora", base_url=mirror.as_uri())
    with np.load(dest / "cora.npz", allow_pickle=False) as z:
        assert array_digest({k: z[k] for k in z.files}) == PLANETOID_ARRAYS_SHA256["cora"]
    assert "kimiyoung/planetoid" in (dest / "README.txt").read_text()


def test_altered_pickles_fail_the_array_check(tmp_path):
    arrays = npz_arrays("cora")
    arrays["labels"] = arrays["labels"].copy()
    arrays["labels"][0] = (arrays["labels"][0] + 1) % 7
    source = tmp_path / "source"
    source.mkdir()
    for file, data in ind_files(arrays, "cora", 2).items():
        (source / file).write_bytes(data)
    with pytest.raises(ChecksumError, match="the converted Planetoid arrays have digest"):
        datasets.prepare("cora", source, tmp_path / "out")


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_the_unpickler_refuses_anything_but_the_planetoid_classes(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(DatasetError, match=r"asks for (posix|os)\.system.*refusing"):
        load_pickle(pickle.dumps(_Exploit(marker)), "ind.cora.x")
    assert not marker.exists()
    with pytest.raises(DatasetError, match="not a readable Planetoid pickle"):
        load_pickle(pickle.dumps(np.zeros(3))[:-5], "ind.cora.y")


def test_prepare_from_the_local_npz(tmp_path, capsys):
    dest = tmp_path / "planetoid"
    for name in ("cora", "citeseer"):
        assert main(["data", "prepare", name, "--from", str(SHARED), "--dest", str(dest)]) == 0
        assert (dest / f"{name}.npz").read_bytes() == (SHARED / f"{name}.npz").read_bytes()
        assert PLANETOID_SHA256[name] in (dest / "README.txt").read_text()
    bad = tmp_path / "bad"
    bad.mkdir()
    data = bytearray((SHARED / "cora.npz").read_bytes())
    data[len(data) // 2] ^= 1
    (bad / "cora.npz").write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["data", "prepare", "cora", "--from", str(bad), "--dest", str(tmp_path / "x")]) == 2
    assert "checksum mismatch" in capsys.readouterr().err
    assert main(["data", "prepare", "cora", "--from", str(tmp_path), "--dest",
                 str(tmp_path / "y")]) == 2
    assert "and no prepared cora.npz there" in capsys.readouterr().err
