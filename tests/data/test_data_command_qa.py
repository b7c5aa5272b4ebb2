"""`seqmap data download/prepare` on damaged or awkward inputs: one-line errors, nothing silently stale."""

import gzip
import hashlib
import io
import wave
import zipfile

import numpy as np
import pytest

from seqmap.cli import main
from seqmap.data import datasets as ds
from seqmap.data.dataset_files import npz_arrays_sha256
from seqmap.data.dataset_registry import DATASETS
from seqmap.data.fsdd import build_npz


def test_dest_below_a_file_is_a_one_line_error(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert main(["data", "download", "tatoeba-en-zh", "--dest", str(afile / "sub")]) == 2
    err = capsys.readouterr().err
    assert err == (f"seqmap: error: cannot create --dest {afile / 'sub'} (Not a directory); give a folder you can "
                   "write to whose parents are folders\n")
    assert afile.read_text() == "mine\n"


def test_a_folder_where_a_prepared_file_goes_is_a_one_line_error(tmp_path):
    (tmp_path / "train.en").mkdir()
    with pytest.raises(ds.DatasetError) as info:
        ds.download("tatoeba-en-zh", tmp_path)  # bundled: written without the network
    assert str(info.value) == (f"cannot write {tmp_path / 'train.en'} (Is a directory); give a --dest folder you "
                               "can write to, with no folder of that name in it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.en"]  # no temporary file left behind


def test_download_with_a_file_named_source_in_dest(tmp_path):
    (tmp_path / "source").write_text("mine\n")
    with pytest.raises(ds.DatasetError) as info:
        ds.download("ptb", tmp_path, base_url=(tmp_path / "mirror").as_uri())
    assert str(info.value) == (f"{tmp_path / 'source'} is a file, where download keeps the upstream files; move it "
                               "away or give another --dest")
    assert (tmp_path / "source").read_text() == "mine\n"


def _wav() -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.arange(2000, dtype="<i2").tobytes())
    return out.getvalue()


def test_fsdd_archive_with_a_corrupt_member_is_a_dataset_error():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("fsdd/recordings/0_ann_0.wav", _wav())
    archive = bytearray(buf.getvalue())
    archive[60] ^= 0xFF  # inside the deflated data of the one member
    with pytest.raises(ds.DatasetError, match=r"^fsdd/recordings/0_ann_0\.wav in the FSDD archive does not "
                                              r"decompress \(.*\); the archive is damaged: fetch it again$"):
        build_npz(bytes(archive))


def test_download_fetches_files_without_a_checksum_again(tmp_path, monkeypatch):
    """A file with no checksum (Planetoid's pickles, FSDD's archive) cannot be told intact: a broken copy from an
    earlier run must not be reused, or "fetch it again" could never work without --force."""
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a.txt").write_bytes(b"broken\n")
    toy = ds.Dataset(name="toy", description="toy", license="none", base_url=mirror.as_uri(),
                     files=(ds.SourceFile("a.txt", "", "a.txt"),))
    monkeypatch.setitem(DATASETS, "toy", toy)
    ds.download("toy", tmp_path / "out")
    (mirror / "a.txt").write_bytes(b"fixed\n")
    ds.download("toy", tmp_path / "out")
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"fixed\n"
    assert (tmp_path / "out" / "source" / "a.txt").read_bytes() == b"fixed\n"


def test_a_gzipped_npz_copy_verifies_and_is_written_as_the_npz(tmp_path, monkeypatch):
    """prepare looks for NAME.npz.gz too and checksums are of the content: a gzipped .npz verifies like the .npz."""
    buf = io.BytesIO()
    np.savez(buf, x=np.arange(6, dtype=np.uint8).reshape(1, 2, 3), y=np.array([7], dtype=np.uint8))
    npz = buf.getvalue()
    digest = npz_arrays_sha256(npz, "toy.npz")
    toy = ds.Dataset(name="toy", description="toy", license="none",
                     files=(ds.SourceFile("toy.npz", digest, "toy.npz", digest="npz-arrays"),))
    monkeypatch.setitem(DATASETS, "toy", toy)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "toy.npz.gz").write_bytes(gzip.compress(npz))
    ds.prepare("toy", tmp_path / "src", tmp_path / "out")
    assert (tmp_path / "out" / "toy.npz").read_bytes() == npz


@pytest.mark.parametrize("argv, message", [
    (["download", "ptb", "--from", "copy"],
     "--from is for seqmap data prepare, not download; leave it out or run seqmap data prepare ptb --from copy"),
    (["prepare", "ptb", "--from", "copy", "--force"], "--force is for seqmap data download, not prepare; leave it out"),
    (["prepare", "ptb", "--from", "copy", "--base-url", "http://mirror"],
     "--base-url is for seqmap data download, not prepare; leave it out"),
    (["list", "--dest", "out"], "--dest is for seqmap data download and prepare, not list; leave it out"),
])
def test_an_option_of_another_action_is_refused_not_ignored(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["data", *argv]) == 2
    assert capsys.readouterr() == ("", f"seqmap: error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_prepare_does_not_overwrite_a_readme_of_the_users_own(tmp_path, monkeypatch):
    """--dest may be --from, which may hold a README.txt of the user's; seqmap's own (an earlier run's) is replaced."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_bytes(b"a\n")
    (src / "README.txt").write_text("my notes\n")
    toy = ds.Dataset(name="toy", description="toy", license="none",
                     files=(ds.SourceFile("a.txt", hashlib.sha256(b"a\n").hexdigest(), "train.en"),))
    monkeypatch.setitem(DATASETS, "toy", toy)
    with pytest.raises(ds.DatasetError) as info:
        ds.prepare("toy", src, src)
    assert str(info.value) == (f"--dest {src} holds a README.txt that seqmap did not write, and preparing toy there "
                               "would overwrite it; give another --dest, or move that file away")
    assert sorted((p.name, p.read_bytes()) for p in src.iterdir()) == [("README.txt", b"my notes\n"), ("a.txt", b"a\n")]
    ds.download("tatoeba-en-zh", tmp_path / "out")  # bundled: written without the network
    ds.prepare("toy", src, tmp_path / "out")  # over an earlier run's README.txt: fine
    assert (tmp_path / "out" / "README.txt").read_text().startswith("toy: toy\n")


def test_download_onto_a_folder_where_a_fetched_file_goes_is_a_one_line_error(tmp_path, monkeypatch):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "a.txt").write_bytes(b"a\n")
    toy = ds.Dataset(name="toy", description="toy", license="none", base_url=mirror.as_uri(),
                     files=(ds.SourceFile("a.txt", hashlib.sha256(b"a\n").hexdigest(), "a.txt"),))
    monkeypatch.setitem(DATASETS, "toy", toy)
    (tmp_path / "out" / "source" / "a.txt").mkdir(parents=True)
    with pytest.raises(ds.DatasetError) as info:
        ds.download("toy", tmp_path / "out")
    assert str(info.value) == (f"cannot write {tmp_path / 'out' / 'source' / 'a.txt'} (Is a directory); give a "
                               "--dest folder you can write to, with no folder of that name in it")
    assert [p.name for p in (tmp_path / "out" / "source").iterdir()] == ["a.txt"]  # no temporary file left behind


def test_prepare_without_the_prepared_file_names_the_upstream_route(tmp_path):
    with pytest.raises(ds.MissingFilesError) as info:
        ds.prepare("debian-descriptions", tmp_path, tmp_path / "out")
    assert str(info.value).endswith(
        "(from the upstream Translation-en.bz2, Packages.xz instead: seqmap data download debian-descriptions "
        "--base-url file:///FOLDER --dest DEST, with FOLDER holding dists/bookworm/main/i18n/Translation-en.bz2, "
        "dists/bookworm/main/binary-amd64/Packages.xz)")
