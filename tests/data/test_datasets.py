import functools
import gzip
import hashlib
import http.server
import shutil
import socket
import threading
from pathlib import Path

import pytest

from seqmap.data import datasets as ds

# The shared corpora live next to the repository (see /work/shared/data/README.md); tests that read
# them skip when they are absent. Everything else runs on the bundled copies.
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared corpora not found at {SHARED}")

# Golden values of this module's own Tatoeba split (SHA-256 of "en\tzh" lines joined by "\n"), recorded
# when the split was designed. They change only if the split rule or the bundled file changes.
TATOEBA_SPLIT_SHA256 = {
    "train": "2fa4d492b24d0d2640a5cf252606a88dfb6c9173a3f3a0d26a99f52173e03a6f",
    "valid": "a1c4bec15280bbedac879e851c3a2111241791349d1cee6c8b4cc9aed0bac110",
    "test": "95ee4a1053cd80007cb5ba9df82e9c3352abd4cf84533fc50ee2c8ac23ec1df9",
}


@pytest.fixture(scope="module")
def tatoeba_splits():
    return ds.tatoeba_en_zh_splits()


@pytest.fixture
def serve():
    """serve(folder) -> base URL of a loopback HTTP server over that folder (random port)."""
    servers = []

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    def start(folder: Path) -> str:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(folder)))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/nothing-here"


def _lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


# ---- bundled Tatoeba ------------------------------------------------------------------------------


def test_tatoeba_keeps_every_row_with_its_attribution():
    rows = ds.tatoeba_en_zh_rows()
    assert len(rows) == 23610 and len(set(rows)) == 23610  # no exact duplicates, none dropped
    assert len({en for en, _, _ in rows}) == 22773
    assert rows[0] == ("Hi.", "嗨。", "CC-BY 2.0 (France) Attribution: tatoeba.org #538123 (CM) & #891077 (Martha)")
    assert all(attr.startswith("CC-BY 2.0 (France) Attribution: tatoeba.org #") for _, _, attr in rows)
    about = ds.tatoeba_en_zh_about()
    assert "2020-08-23" in about and "Attribution: www.manythings.org/anki and tatoeba.org" in about


def test_bundled_files_match_registry_checksums():
    for dataset in ds.list_datasets():
        for file in dataset.files:
            if file.bundled:
                assert hashlib.sha256(ds.bundled_bytes(file.bundled)).hexdigest() == file.sha256, file.bundled


def test_tatoeba_split_sizes_and_disjoint_by_english(tatoeba_splits):
    assert [len(part) for part in tatoeba_splits] == [22110, 500, 1000]
    keys = [{ds.english_key(en) for en, _ in part} for part in tatoeba_splits]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    all_pairs = sorted(p for part in tatoeba_splits for p in part)
    assert all_pairs == sorted((en, zh) for en, zh, _ in ds.tatoeba_en_zh_rows())


def test_tatoeba_split_is_deterministic_golden(tatoeba_splits):
    assert tatoeba_splits.test[0] == ("Cheers!", "乾杯!")
    for name, part in zip(ds.Splits._fields, tatoeba_splits, strict=True):
        digest = hashlib.sha256("\n".join(f"{en}\t{zh}" for en, zh in part).encode("utf-8")).hexdigest()
        assert digest == TATOEBA_SPLIT_SHA256[name], name


def test_split_by_key_keeps_groups_together_and_checks_sizes():
    rows = list(range(10))
    keys = ["a", "a", "a", "b", "c", "d", "e", "f", "g", "h"]
    splits = ds.split_by_key(rows, keys, valid_size=1, test_size=2)
    groups = [{keys[r] for r in part} for part in splits]
    assert sum(len(p) for p in splits) == 10 and len(splits.test) >= 2 and len(splits.valid) >= 1
    assert sum("a" in g for g in groups) == 1  # all three "a" rows in one split
    assert all(part == sorted(part) for part in splits)  # original order kept
    with pytest.raises(ValueError, match="valid_size"):
        ds.split_by_key(rows, keys, valid_size=-1, test_size=2)
    with pytest.raises(ValueError, match="no training data"):
        ds.split_by_key(rows, keys, valid_size=5, test_size=5)


# ---- bundled tiny Shakespeare ----------------------------------------------------------------------


def test_tinyshakespeare_bundled_text_and_nanogpt_split():
    text = ds.tinyshakespeare_text()
    assert hashlib.md5(text.encode("utf-8")).hexdigest() == "6fb458f1232090904fb40fe944165e91"
    train, valid = ds.tinyshakespeare_splits()
    assert (len(train), len(valid)) == (1_003_854, 111_540)
    assert train + valid == text


# ---- registry ---------------------------------------------------------------------------------------


def test_registry_names_and_unknown_name_suggests_nearest():
    names = [d.name for d in ds.list_datasets()]
    assert names == sorted(names) and {"citeseer", "cora", "debian-descriptions", "mnist", "multi30k", "ptb",
                                       "tatoeba-en-zh", "tinyshakespeare"} <= set(names)
    assert ds.get_dataset("tinyshakespeare").bundled and ds.get_dataset("tinyshakespeare").downloadable
    assert not ds.get_dataset("tatoeba-en-zh").downloadable and not ds.get_dataset("ptb").bundled
    with pytest.raises(ds.DatasetError, match="Did you mean 'multi30k'"):
        ds.get_dataset("multi30")


# ---- download ---------------------------------------------------------------------------------------


@needs_shared
def test_download_ptb_from_loopback_server_verifies_and_prepares(serve, tmp_path):
    out = ds.download("ptb", tmp_path / "ptb", base_url=serve(SHARED / "ptb"))
    assert out == tmp_path / "ptb"
    assert {p.name for p in (out / "source").iterdir()} == {"ptb.train.txt", "ptb.valid.txt", "ptb.test.txt"}
    assert [_lines(out / f"{s}.txt") for s in ("train", "valid", "test")] == [42068, 3370, 3761]
    assert (out / "train.txt").read_bytes() == (SHARED / "ptb" / "ptb.train.txt").read_bytes()
    assert not [p for p in out.rglob(".*")]  # no temporary files left behind
    # verified files are not fetched again: a second run needs no network at all
    ds.download("ptb", out, base_url=_closed_port_url())
    with pytest.raises(ds.DownloadError):
        ds.download("ptb", out, base_url=_closed_port_url(), force=True)


@needs_shared
def test_download_tinyshakespeare_from_loopback_server(serve, tmp_path):
    out = ds.download("tinyshakespeare", tmp_path, base_url=serve(SHARED / "tinyshakespeare") + "/")
    train, valid = ds.tinyshakespeare_splits()
    assert (out / "train.txt").read_text(encoding="utf-8") == train
    assert (out / "valid.txt").read_text(encoding="utf-8") == valid
    assert "karpathy/char-rnn" in (out / "README.txt").read_text(encoding="utf-8")


@needs_shared
def test_download_multi30k_mirror_with_gzip_and_plain_files(serve, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "raw").mkdir(parents=True)
    (mirror / "tok").mkdir()
    for file in ds.get_dataset("multi30k").files:
        local = SHARED / "multi30k" / (file.name if file.name.endswith(".gz") else file.name + ".gz")
        if file.path.startswith("raw/"):
            shutil.copy(local, mirror / file.path)  # served gzip, as upstream
        else:
            (mirror / file.path).write_bytes(gzip.decompress(local.read_bytes()))  # served plain, as upstream
    out = ds.download("multi30k", tmp_path / "out", base_url=serve(mirror))
    assert (out / "source" / "train.en.gz").read_bytes()[:2] == ds.GZIP_MAGIC
    assert _lines(out / "train.de") == 29000 and _lines(out / "test2016.lc.norm.tok.en") == 1000


def test_download_corrupted_file_raises_and_leaves_nothing(serve, tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    data = bytearray(ds.tinyshakespeare_text().encode("utf-8"))
    data[1000] ^= 1
    (served / "input.txt").write_bytes(bytes(data))
    dest = tmp_path / "dest"
    expected = ds.get_dataset("tinyshakespeare").files[0].sha256
    with pytest.raises(ds.ChecksumError) as info:
        ds.download("tinyshakespeare", dest, base_url=serve(served))
    message = str(info.value)
    assert "input.txt" in message and expected in message and hashlib.sha256(data).hexdigest() in message
    assert "deleted" in message
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_download_unreachable_url_names_url_and_suggests_prepare(tmp_path):
    base = _closed_port_url()
    with pytest.raises(ds.DownloadError) as info:
        ds.download("ptb", tmp_path, base_url=base)
    message = str(info.value)
    assert f"{base}/ptb.train.txt" in message and "seqmap data prepare ptb --from DIR" in message
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    with pytest.raises(ds.DownloadError) as info:  # a bundled dataset: the hint says how to use the copy
        ds.download("tinyshakespeare", tmp_path, base_url=base)
    assert str(info.value).endswith("ships with seqmap and needs no download: train on it with "
                                    "data.dataset: tinyshakespeare in the config (no file paths).")


def test_download_from_file_url_mirror_and_bad_base_url(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "input.txt").write_text(ds.tinyshakespeare_text(), encoding="utf-8")
    out = ds.download("tinyshakespeare", tmp_path / "out", base_url=mirror.as_uri())
    assert (out / "valid.txt").read_text(encoding="utf-8") == ds.tinyshakespeare_splits().valid
    with pytest.raises(ds.DatasetError, match="must start with http"):
        ds.download("tinyshakespeare", tmp_path / "out2", base_url="localhost:8000/data")
    assert not (tmp_path / "out2").exists()


def test_download_http_404_is_a_download_error(serve, tmp_path):
    base = serve(tmp_path)  # an empty folder
    with pytest.raises(ds.DownloadError, match="HTTP 404"):
        ds.download("tinyshakespeare", tmp_path / "dest", base_url=base)


def test_download_bundled_only_dataset_writes_layout_without_network(tmp_path):
    out = ds.download("tatoeba-en-zh", tmp_path, base_url=_closed_port_url())
    assert [_lines(out / f"{s}.en") for s in ("train", "valid", "test")] == [22110, 500, 1000]
    assert _lines(out / "test.zh") == _lines(out / "test.attribution") == 1000
    first = [(out / f"test.{s}").read_text(encoding="utf-8").splitlines()[0] for s in ("en", "zh", "attribution")]
    assert first[:2] == ["Cheers!", "乾杯!"] and first[2].startswith("CC-BY 2.0 (France) Attribution: tatoeba.org #")
    assert "manythings" in (out / "about.txt").read_text(encoding="utf-8")


# ---- prepare ----------------------------------------------------------------------------------------


@needs_shared
def test_prepare_multi30k_from_shared_copy(tmp_path):
    out = ds.prepare("multi30k", SHARED / "multi30k", tmp_path)
    for split, n in (("train", 29000), ("val", 1014), ("test2016", 1000)):
        for lang in ("en", "de", "fr", "cs"):
            assert _lines(out / f"{split}.{lang}") == n, (split, lang)
        for lang in ("en", "de"):
            assert _lines(out / f"{split}.lc.norm.tok.{lang}") == n, (split, lang)
    assert (out / "train.en").read_text(encoding="utf-8").startswith("Two young, White males are outside")
    assert (out / "train.lc.norm.tok.en").read_text(encoding="utf-8").startswith("two young , white males")


@needs_shared
def test_prepare_ptb_from_shared_copy_and_from_gzip(tmp_path):
    out = ds.prepare("ptb", SHARED / "ptb", tmp_path / "plain")
    assert [_lines(out / f"{s}.txt") for s in ("train", "valid", "test")] == [42068, 3370, 3761]
    mixed = tmp_path / "mixed"  # valid and test gzip-compressed, train plain: same checksums
    mixed.mkdir()
    shutil.copy(SHARED / "ptb" / "ptb.train.txt", mixed)
    for split in ("valid", "test"):
        (mixed / f"ptb.{split}.txt.gz").write_bytes(gzip.compress((SHARED / "ptb" / f"ptb.{split}.txt").read_bytes()))
    again = ds.prepare("ptb", mixed, tmp_path / "from-gz")
    assert (again / "valid.txt").read_bytes() == (out / "valid.txt").read_bytes()
    assert ds.read_text(mixed / "ptb.test.txt.gz") == (out / "test.txt").read_text(encoding="utf-8")


@needs_shared
def test_prepare_names_missing_files_and_where_it_looked(tmp_path):
    shutil.copy(SHARED / "ptb" / "ptb.valid.txt", tmp_path)
    with pytest.raises(ds.MissingFilesError) as info:
        ds.prepare("ptb", tmp_path, tmp_path / "out")
    message = str(info.value)
    assert message == (f"cannot prepare ptb: 2 of 3 files missing from {tmp_path}: looked for ptb.train.txt or "
                       "ptb.train.txt.gz; ptb.test.txt or ptb.test.txt.gz; give --from the folder that holds them")
    assert not (tmp_path / "out").exists()


def test_prepare_missing_source_dir_and_corrupt_copy(tmp_path):
    with pytest.raises(ds.MissingFilesError, match="does not exist"):
        ds.prepare("tinyshakespeare", tmp_path / "absent", tmp_path / "out")
    (tmp_path / "input.txt").write_text(ds.tinyshakespeare_text()[:-1], encoding="utf-8")
    with pytest.raises(ds.ChecksumError, match="expected sha256 86c4e6aa"):
        ds.prepare("tinyshakespeare", tmp_path, tmp_path / "out")
    (tmp_path / "input.txt").unlink()
    (tmp_path / "input.txt.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ds.ChecksumError, match="does not decompress"):
        ds.prepare("tinyshakespeare", tmp_path, tmp_path / "out")


def test_prepare_and_download_refuse_a_file_where_a_folder_goes(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    with pytest.raises(ds.DatasetError) as info:
        ds.prepare("ptb", afile, tmp_path / "out")
    assert str(info.value) == f"cannot prepare ptb: --from {afile} is a file; give the folder that holds it"
    with pytest.raises(ds.DatasetError) as info:
        ds.download("tinyshakespeare", afile)  # bundled: written without the network
    assert str(info.value) == f"--dest {afile} is a file; give a folder (it is created if missing)"
    assert afile.read_text() == "mine\n" and not (tmp_path / "out").exists()
