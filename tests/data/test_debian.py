"""The Debian descriptions dataset: the recipe on synthetic index files, the download route, the local copy."""

import bz2
import dataclasses
import gzip
import hashlib
import lzma
from collections import Counter
from pathlib import Path

import pytest

from seqmap.cli import main
from seqmap.data import dataset_registry, datasets
from seqmap.data.dataset_files import ChecksumError, DatasetError, SourceFile
from seqmap.data.debian import (
    COLUMNS,
    build_descriptions,
    classification_rows,
    classification_text,
    descriptions_tsv,
    parse_deb822,
    read_descriptions,
    split_description,
    split_of,
    word_count,
)

LOCAL_COPY = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "debian_descriptions"
TEN_WORDS = "one two three four five six seven eight nine ten"

# Translation-en: Package, Description-md5, Description-en (a synopsis line, then the long description)
TRANSLATION_EN = f"""Package: zeta-tool
Description-md5: 11111111111111111111111111111111
Description-en: a tool for zeta
 The zeta tool   does {TEN_WORDS}.
 .
 Second  paragraph
   with verbatim indentation.
 .
 .

Package: alpha-lib
Description-md5: 22222222222222222222222222222222
Description-en: library for alpha
 Alpha is a library that does {TEN_WORDS}.

Package: alpha-lib
Description-md5: 99999999999999999999999999999999
Description-en: an old description of alpha-lib that no Packages stanza has any more
 Alpha was a library that did {TEN_WORDS}.

Package: short-one
Description-md5: 33333333333333333333333333333333
Description-en: too short
 Only nine words here, markers not counted, no.
 .
 really

Package: beta-copy
Description-md5: 44444444444444444444444444444444
Description-en: library for alpha
 Alpha is a library that does {TEN_WORDS}.

Package: arm-only
Description-md5: 55555555555555555555555555555555
Description-en: not built for amd64
 This package is not built for amd64 and so is not in Packages, {TEN_WORDS}.
"""

# Packages (binary-amd64): Section and Source; a Source with a version, one without Source
PACKAGES = """Package: alpha-lib
Source: alpha (1.2-3)
Version: 1.2-3+b1
Section: libs
Description: library for alpha
Description-md5: 22222222222222222222222222222222

Package: zeta-tool
Section: utils
Description: a tool for zeta
Description-md5: 11111111111111111111111111111111

Package: short-one
Section: misc
Description-md5: 33333333333333333333333333333333

Package: beta-copy
Source: alpha
Section: libdevel
Description-md5: 44444444444444444444444444444444
"""


def test_deb822_stanzas_keep_continuation_lines():
    stanzas = list(parse_deb822("A: 1\nB: two\n words\n .\n\n\nA: 3\n", "x"))
    assert stanzas == [{"A": "1", "B": "two\n words\n ."}, {"A": "3"}]
    with pytest.raises(DatasetError, match="x line 1: a continuation line with no field"):
        list(parse_deb822(" orphan\n", "x"))
    with pytest.raises(DatasetError, match="x line 2: not a 'Field: value' line"):
        list(parse_deb822("A: 1\nno colon here\n", "x"))


def test_long_description_paragraphs_and_whitespace():
    value = "  a  synopsis \n First   line\n\tsecond line\n .\n .\n   verbatim  code\n ."
    synopsis, description = split_description(value)
    assert synopsis == "a synopsis"
    assert description == "First line second line <p> verbatim code"  # empty paragraphs dropped, no marker at ends
    assert split_description("only a synopsis") == ("only a synopsis", "")
    assert word_count("a b <p> c") == 3


def test_split_follows_the_sha256_of_the_source_package():
    for name in ("alpha", "zeta", "linux", "python3.11", "dpdk"):
        h = int(hashlib.sha256(name.encode()).hexdigest()[:8], 16) % 100
        assert split_of(name) == ("train" if h < 96 else "valid" if h < 98 else "test")
    assert Counter(split_of(f"pkg{i}") for i in range(5000)).most_common(1)[0][0] == "train"


def test_the_recipe_on_synthetic_index_files():
    rows = build_descriptions(TRANSLATION_EN, PACKAGES)
    # joined on (Package, md5): the stale alpha-lib translation and the non-amd64 package are dropped;
    # short-one has 9 words; beta-copy repeats alpha-lib's (synopsis, description), alpha-lib comes first by name
    assert [r[0] for r in rows] == ["alpha-lib", "zeta-tool"]
    alpha, zeta = rows
    assert alpha == ("alpha-lib", "alpha", "libs", "library for alpha", f"Alpha is a library that does {TEN_WORDS}.",
                     split_of("alpha"))
    assert zeta[1:4] == ("zeta-tool", "utils", "a tool for zeta")  # no Source: the package is its own source
    assert zeta[4] == f"The zeta tool does {TEN_WORDS}. <p> Second paragraph with verbatim indentation."
    tsv = descriptions_tsv(rows)
    assert tsv.decode().splitlines()[0] == "\t".join(COLUMNS)
    assert read_descriptions(tsv.decode()) == [dict(zip(COLUMNS, r)) for r in rows]


def test_classification_text_joins_synopsis_and_paragraphs():
    assert classification_text("a tool.", "First. <p> Second.") == "a tool. First. Second."
    assert classification_text("a tool", "") == "a tool"
    rows = [dict(zip(COLUMNS, ("p", "s", "libs", "syn", "a <p> b", "test")))]
    assert classification_rows(rows)["test"] == [("syn. a b", "libs", "p")]
    with pytest.raises(DatasetError, match="split 'dev' is not one of train, valid, test"):
        classification_rows([{**rows[0], "split": "dev"}])


def test_bad_descriptions_files_give_one_line():
    with pytest.raises(DatasetError, match=r"lacks the column\(s\) section, split \(it has package"):
        read_descriptions("package\tsource_package\tsynopsis\tdescription\nx\ty\tz\tw\n")
    with pytest.raises(DatasetError, match="line 2 has 2 tab-separated fields, expected 6"):
        read_descriptions("\t".join(COLUMNS) + "\na\tb\n")
    with pytest.raises(DatasetError, match="is empty"):
        read_descriptions("")


def _mirror(tmp_path: Path, translation: str, packages: str, built_sha256: str):
    """A file:// mirror holding the two index files as the archive serves them (.bz2, .xz), and a dataset for it."""
    root = tmp_path / "mirror"
    for path, data in (("dists/bookworm/main/i18n/Translation-en.bz2", bz2.compress(translation.encode())),
                       ("dists/bookworm/main/binary-amd64/Packages.xz", lzma.compress(packages.encode()))):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
    real = dataset_registry.DATASETS["debian-descriptions"]
    raw = tuple(SourceFile(f.path, hashlib.sha256(text.encode()).hexdigest())
                for f, text in zip(real.raw, (translation, packages)))
    files = (SourceFile("descriptions.tsv.gz", built_sha256),)
    return root, dataclasses.replace(real, name="debian-mini", raw=raw, files=files)


def test_download_rebuilds_the_tsv_from_the_index_files(tmp_path, monkeypatch):
    expected = descriptions_tsv(build_descriptions(TRANSLATION_EN, PACKAGES))
    root, mini = _mirror(tmp_path, TRANSLATION_EN, PACKAGES, hashlib.sha256(expected).hexdigest())
    monkeypatch.setitem(dataset_registry.DATASETS, "debian-mini", mini)
    dest = datasets.download("debian-mini", tmp_path / "out", base_url=root.as_uri())
    assert (dest / "source" / "descriptions.tsv").read_bytes() == expected
    lines = {split: (dest / f"{split}.tsv").read_text().splitlines() for split in ("train", "valid", "test")}
    assert sorted(line.split("\t")[2] for split in lines.values() for line in split) == ["alpha-lib", "zeta-tool"]
    summaries = [line.split("\t") for s in ("train", "valid", "test")
                 for line in (dest / f"summary_{s}.tsv").read_text().splitlines()]
    rows = {r["package"]: r for r in read_descriptions(expected.decode())}
    assert sorted(summaries, key=lambda r: r[2]) == [[rows[p]["description"], rows[p]["synopsis"], p]
                                                     for p in ("alpha-lib", "zeta-tool")]
    assert "snapshot.debian.org" in (dest / "README.txt").read_text()
    # a recipe that does not reproduce the published file is a checksum error, and nothing is prepared
    root, wrong = _mirror(tmp_path / "b", TRANSLATION_EN, PACKAGES, "0" * 64)
    monkeypatch.setitem(dataset_registry.DATASETS, "debian-mini", wrong)
    with pytest.raises(ChecksumError, match="did not reproduce the published file"):
        datasets.download("debian-mini", tmp_path / "out2", base_url=root.as_uri())
    assert not (tmp_path / "out2" / "train.tsv").exists()


def test_the_registry_pins_a_snapshot_and_the_readme_checksums():
    d = dataset_registry.DATASETS["debian-descriptions"]
    assert d.base_url.startswith("https://snapshot.debian.org/archive/debian/2026071")
    assert [f.sha256[:12] for f in d.raw] == ["62f59c3cdca9", "515e692f2c41"]  # README section 9
    assert [f.name for f in d.files] == ["descriptions.tsv.gz"]


def test_prepare_without_the_file_is_one_clear_error(tmp_path, capsys):
    assert main(["data", "prepare", "debian-descriptions", "--from", str(tmp_path), "--dest",
                 str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "cannot prepare debian-descriptions: 1 of 1 files missing" in err.splitlines()[0]
    (tmp_path / "descriptions.tsv.gz").write_bytes(gzip.compress(b"package\tsection\n"))
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        datasets.prepare("debian-descriptions", tmp_path, tmp_path / "out")


@pytest.mark.skipif(not LOCAL_COPY.is_dir(), reason="the shared copy is not next to the repository")
def test_prepare_from_the_local_copy(tmp_path):
    """Row counts and sections as /work/shared/data/README.md section 9 states, and the recipe's invariants."""
    dest = datasets.prepare("debian-descriptions", LOCAL_COPY, tmp_path)
    splits = {s: [line.split("\t") for line in (dest / f"{s}.tsv").read_text().splitlines()]
              for s in ("train", "valid", "test")}
    assert {s: len(rows) for s, rows in splits.items()} == {"train": 57540, "valid": 1254, "test": 1405}
    sections = Counter(row[1] for rows in splits.values() for row in rows)
    assert len(sections) == 58
    assert sections.most_common(3) == [("libs", 6376), ("libdevel", 4906), ("python", 4490)]
    assert all(len(row) == 3 and "<p>" not in row[0] for rows in splits.values() for row in rows)
    summaries = {s: [line.split("\t") for line in (dest / f"summary_{s}.tsv").read_text().splitlines()]
                 for s in ("train", "valid", "test")}
    assert {s: len(rows) for s, rows in summaries.items()} == {"train": 57540, "valid": 1254, "test": 1405}
    assert [row[2] for row in summaries["test"]] == [row[2] for row in splits["test"]]  # the same rows, in order
    assert sum(" <p> " in row[0] for rows in summaries.values() for row in rows) == 43240  # README section 9
    rows = read_descriptions(gzip.decompress((LOCAL_COPY / "descriptions.tsv.gz").read_bytes()).decode())
    assert all(r["split"] == split_of(r["source_package"]) for r in rows)
    assert min(word_count(r["description"]) for r in rows) >= 10
    assert [r["package"] for r in rows] == sorted(r["package"] for r in rows)
    assert len({(r["synopsis"], r["description"]) for r in rows}) == len(rows)
