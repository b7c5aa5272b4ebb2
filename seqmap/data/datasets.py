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
``debian-descriptions`` ``{train,valid,test}.tsv``: ``text<TAB>section<TAB>package`` (no header), for
                    ``data.task: classification`` (see ``seqmap/data/debian.py`` for the text)
==================  ==============================================================================

Every prepared directory also gets a ``README.txt`` naming the source, license and files.

Checksums
---------
Each upstream file has one SHA-256, always of its **content**: the bytes after decompression when the
file is gzip, bzip2 or xz (told by the magic number), the bytes as they are otherwise. So one checksum
verifies a file whichever way it is stored: the Multi30k ``raw/*.gz`` files as served, a gunzipped
copy of them, or a gzipped copy of the ``tok/`` files (which upstream serves as plain text). Whether
bytes are compressed is read from the magic number, never from the file name; the formats' own
checks (gzip's CRC, bzip2's and xz's) guard the compressed bytes.

Downloads and mirrors
---------------------
:func:`download` fetches every upstream file of a dataset to ``DEST/source/`` under its upstream name,
exactly as served, then runs :func:`prepare` from there into ``DEST``. ``base_url`` replaces the
dataset's upstream base URL, so a mirror must hold the files at the same relative paths (for Multi30k,
``raw/train.en.gz`` and ``tok/train.lc.norm.tok.en``); ``file://`` URLs work too.
A dataset whose published file is served nowhere (``debian-descriptions``) lists the files it is made
from as ``raw``: :func:`download` fetches those, builds the published file from them with the
dataset's recipe, checks that file's checksum too, then prepares as above.
:func:`prepare` accepts a flat directory or one keeping the upstream sub-folders, and for each file
either its upstream name or the name with ``.gz`` added or removed.

All user-facing failures raise :class:`DatasetError` (or a subclass) with a message saying what to do.

This module downloads and prepares; the registry (:class:`Dataset`, ``DATASETS``, the checksums) is in
``dataset_registry.py``, the bundled corpora and their splits in ``bundled_corpora.py``, and
:class:`SourceFile`, checksum checks and the errors in ``dataset_files.py``. Their public names are
importable from here too.
"""

from __future__ import annotations

import http.client
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from seqmap.data.bundled_corpora import (
    TATOEBA_TEST_SIZE,
    TATOEBA_VALID_SIZE,
    TINYSHAKESPEARE_TRAIN_FRACTION,
    Splits,
    TextSplits,
    bundled_bytes,
    english_key,
    split_by_key,
    split_text,
    tatoeba_en_zh_about,
    tatoeba_en_zh_rows,
    tatoeba_en_zh_splits,
    tinyshakespeare_splits,
    tinyshakespeare_text,
)
from seqmap.data.dataset_files import (
    GZIP_MAGIC,
    ChecksumError,
    DatasetError,
    DownloadError,
    MissingFilesError,
    SourceFile,
    part_path,
    read_text,
    verified_content,
    write_file,
    write_lines,
)
from seqmap.data.dataset_registry import DATASETS, Dataset, Writer, get_dataset, list_datasets, write_renamed

__all__ = [
    "DATASETS",
    "DOWNLOAD_TIMEOUT_S",
    "GZIP_MAGIC",
    "TATOEBA_TEST_SIZE",
    "TATOEBA_VALID_SIZE",
    "TINYSHAKESPEARE_TRAIN_FRACTION",
    "ChecksumError",
    "Dataset",
    "DatasetError",
    "DownloadError",
    "MissingFilesError",
    "SourceFile",
    "Splits",
    "TextSplits",
    "Writer",
    "download",
    "english_key",
    "get_dataset",
    "list_datasets",
    "prepare",
    "read_text",
    "split_by_key",
    "split_text",
    "tatoeba_en_zh_about",
    "tatoeba_en_zh_rows",
    "tatoeba_en_zh_splits",
    "tinyshakespeare_splits",
    "tinyshakespeare_text",
]

DOWNLOAD_TIMEOUT_S = 60.0  # per blocking network operation, not per file
_README_MARK = b"Prepared by seqmap.data.datasets"  # in every README.txt that prepare writes


def _fetch(dataset: Dataset, file: SourceFile, url: str, target: Path) -> None:
    """Stream ``url`` to a temporary file next to ``target``, verify it, then rename it into place."""
    tmp = part_path(target)
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
            verified_content(file, tmp.read_bytes(), f"{file.name} downloaded from {url}")
        except ChecksumError as err:
            raise ChecksumError(f"{err}. The downloaded file was deleted; try again, or check the mirror.") from None
        os.replace(tmp, target)
    except OSError as err:  # network errors became DownloadError above: this is the local disk
        raise DatasetError(f"cannot write {target} ({err.strerror or err}); give a --dest folder you can write to, "
                           "with no folder of that name in it") from None
    finally:
        tmp.unlink(missing_ok=True)


def _network_hint(dataset: Dataset, url: str, reason: str) -> str:
    hint = (
        f"could not download {url} ({reason}). If you have a local copy of the {dataset.name} files, use it "
        f"instead: seqmap data prepare {dataset.name} --from DIR (or pass another base URL for a mirror)."
    )
    if dataset.bundled:
        hint += (f" A copy of {dataset.name} also ships with seqmap and needs no download: train on it with "
                 f"data.dataset: {dataset.name} in the config (no file paths).")
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
    source = _make_dir(dest) / "source"
    if source.exists() and not source.is_dir():
        raise DatasetError(f"{source} is a file, where download keeps the upstream files; move it away or give "
                           "another --dest")
    source.mkdir(exist_ok=True)
    for file in dataset.raw or dataset.files:
        target = source / file.name
        if target.is_file() and not force and file.sha256:  # a file with no checksum cannot be told intact
            try:
                verified_content(file, target.read_bytes(), str(target))
                continue  # already here and intact
            except ChecksumError:
                pass  # stale or broken: fetch again
        _fetch(dataset, file, f"{root}/{file.path}", target)
    if dataset.raw:
        _build(dataset, source)
    return prepare(name, source, dest)


def _build(dataset: Dataset, source: Path) -> None:
    """Make ``dataset.files`` in ``source`` from its verified ``raw`` files there, and check their checksums."""
    raw = {f.name: verified_content(f, (source / f.name).read_bytes(), str(source / f.name)) for f in dataset.raw}
    built = dataset.build(raw)
    for file in dataset.files:
        try:
            verified_content(file, built[file.name], f"{file.name} built from {', '.join(raw)}")
        except ChecksumError as err:
            raise ChecksumError(f"{err}: the recipe in seqmap did not reproduce the published file") from None
        write_file(source / file.name.removesuffix(".gz"), built[file.name])


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
    if source.is_file():
        raise DatasetError(f"cannot prepare {name}: --from {source} is a file; give the folder that holds it")
    if not source.is_dir():
        raise MissingFilesError(f"cannot prepare {name}: source directory {source} does not exist")
    ready = {f: [p for p in _candidates(source, f) if p.is_file()] for f in dataset.prepared}
    if ready and all(ready.values()):  # the prepared files themselves (e.g. cora.npz): verify and copy
        dest = _make_dir(Path(dest_dir), dataset)
        for file, paths in ready.items():
            write_file(dest / file.out, verified_content(file, paths[0].read_bytes(), str(paths[0])))
        return _write_readme(dataset, dest, [f.out for f in dataset.prepared], dataset.prepared, "")
    found: dict[SourceFile, Path] = {}
    missing: list[str] = []
    for file in dataset.files:
        paths = [p for p in _candidates(source, file) if p.is_file()]
        if paths:
            found[file] = paths[0]
        else:
            missing.append(" or ".join(str(p.relative_to(source)) for p in _candidates(source, file)))
    if missing:
        raise MissingFilesError(
            f"cannot prepare {name}: {len(missing)} of {len(dataset.files)} files missing from {source}"
            + (f" (and no prepared {', '.join(f.name for f in dataset.prepared)} there)" if dataset.prepared else "")
            + f": looked for {'; '.join(missing)}; give --from the folder that holds them"
            + (f" (from the upstream {', '.join(f.name for f in dataset.raw)} instead: seqmap data download {name} "
               f"--base-url file:///FOLDER --dest DEST, with FOLDER holding {', '.join(f.path for f in dataset.raw)})"
               if dataset.raw else "")
        )
    contents = {file.name: verified_content(file, path.read_bytes(), str(path)) for file, path in found.items()}
    return _write_layout(dataset, contents, Path(dest_dir))


def _prepare_from_bundle(dataset: Dataset, dest: Path) -> Path:
    contents = {file.name: bundled_bytes(file.bundled) for file in dataset.files}
    for file in dataset.files:  # guard against a damaged installation
        verified_content(file, contents[file.name], f"bundled {file.bundled}")
    return _write_layout(dataset, contents, dest)


def _make_dir(dest: Path, dataset: Dataset | None = None) -> Path:
    """``dest``, created if missing; a file there is the user's to move. With ``dataset``, a README.txt there must be
    one that seqmap wrote (an earlier run's): one of the user's own is not overwritten."""
    if dest.exists() and not dest.is_dir():
        raise DatasetError(f"--dest {dest} is a file; give a folder (it is created if missing)")
    readme = dest / "README.txt"
    if dataset is not None and readme.is_file() and _README_MARK not in readme.read_bytes():
        raise DatasetError(f"--dest {dest} holds a README.txt that seqmap did not write, and preparing {dataset.name} "
                           "there would overwrite it; give another --dest, or move that file away")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DatasetError(f"cannot create --dest {dest} ({err.strerror or err}); give a folder you can write to "
                           "whose parents are folders") from None
    return dest


def _write_layout(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> Path:
    _make_dir(dest, dataset)
    written = (dataset.writer or write_renamed)(dataset, contents, dest)
    return _write_readme(dataset, dest, written, dataset.files, dataset.base_url)


def _write_readme(dataset: Dataset, dest: Path, written: list[str], files, base_url: str) -> Path:
    served = base_url and not dataset.raw  # a dataset with raw files: its files are built, not served
    sources = [f"{base_url}/{f.path}" if served else f.name for f in files]
    built = [f"  which download builds from  {base_url}/{f.path}  {f.sha256}" for f in dataset.raw] if base_url else []
    readme = [
        f"{dataset.name}: {dataset.description}",
        "",
        f"License: {dataset.license}",
        "",
        _README_MARK.decode() + " from (SHA-256 of the content):",
        *(f"  {src}  {f.sha256 or '(none recorded: the converted arrays are checked)'}"
          f"{' (of its arrays)' if f.digest == 'npz-arrays' else ''}"
          for src, f in zip(sources, files, strict=True)),
        *built,
        "",
        "Files: " + " ".join(written),
    ]
    write_lines(dest / "README.txt", readme)
    return dest
