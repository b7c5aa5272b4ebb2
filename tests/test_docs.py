"""The README and docs/ against the code: every documented `seqmap` command parses with the current CLI,
every config, script and link they name exists, and the README keeps its two front-door commands and its
small config verbatim."""

from __future__ import annotations

import re
import shlex
import unicodedata
from pathlib import Path

import pytest

from seqmap.cli import NO_OVERRIDES, build_parser
from seqmap.config import load_config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

MAIN_JOB = ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e . && '
            'seqmap train configs/tatoeba_en_zh.yaml --run-dir runs/en-zh && '
            'seqmap translate runs/en-zh "I love machine learning."')
TEST_COMMAND = ('python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && '
                'pip install -e ".[test]" && python -m pytest -q')


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def _commands(block: str) -> list[str]:
    """The shell commands of a block: continuation lines joined, split at `&&` and `;`, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        tokens = shlex.split(line, comments=True)
        command: list[str] = []
        for tok in [*tokens, ";"]:
            if tok in ("&&", ";") or tok.endswith(";"):
                if tok.endswith(";") and tok != ";":
                    command.append(tok[:-1])
                if command:
                    out.append(command)
                command = []
            else:
                command.append(tok)
    return [shlex.join(c) for c in out]


def _seqmap_argv(command: str) -> list[str] | None:
    """The arguments after `seqmap` (also `VAR=x seqmap ...` and `torchrun ... -m seqmap ...`), or None."""
    tokens = shlex.split(command)
    while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tokens[0]):
        tokens = tokens[1:]
    if tokens[:1] == ["seqmap"]:
        return tokens[1:]
    if "-m" in tokens and tokens[tokens.index("-m") + 1:tokens.index("-m") + 2] == ["seqmap"]:
        return tokens[tokens.index("-m") + 2:]
    return None


def _documented_seqmap_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in _blocks(page.read_text(encoding="utf-8"), "bash"):
            found += [(page.relative_to(ROOT).as_posix(), c) for c in _commands(block) if _seqmap_argv(c) is not None]
    return found


COMMANDS = _documented_seqmap_commands()


def test_docs_hold_seqmap_commands():
    assert len(COMMANDS) > 50
    assert {page for page, _ in COMMANDS} >= {"README.md", "docs/tasks.md", "docs/serving.md", "docs/reproducing.md"}


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c[:60]}" for p, c in COMMANDS])
def test_docs_seqmap_command_parses_with_the_current_cli(page, command):
    """The verb exists and takes every option given, as `seqmap` itself would parse them (dotted overrides apart)."""
    argv = _seqmap_argv(command)
    overrides = [tok for tok in argv if tok.startswith("--") and "." in tok.split("=", 1)[0]]
    rest, skip = [], False
    for tok in argv:
        if skip:
            skip = False
        elif tok in overrides:
            skip = "=" not in tok
        else:
            rest.append(tok)
    try:
        args, stray = build_parser().parse_known_args(rest)
    except SystemExit:
        pytest.fail(f"{page}: `{command}` does not parse with the current CLI")
    assert [tok for tok in stray if tok.startswith("-")] == [], f"{page}: `{command}`: unknown options"
    assert not (overrides and args.command in NO_OVERRIDES), f"{page}: `{command}`: this verb takes no overrides"


def test_docs_name_configs_and_scripts_that_exist():
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for path in re.findall(r"(?<![\w/.-])((?:configs|bench|docs/images)/[\w./*{},-]*[\w*}])", text):
            placeholder = any(ch in path for ch in "*{") or re.search(r"/(my_|[A-Z]+\b)", path)  # a pattern, or yours
            if not placeholder and not (ROOT / path).exists():
                missing.append(f"{page.name}: {path}")
    assert missing == []


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lowercased, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = "".join(ch for ch in text if ch in " -" or unicodedata.category(ch)[0] in "LN")
    return text.replace(" ", "-")


def test_readme_and_docs_links_resolve():
    broken = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor:
                headings = re.findall(r"^#+ (.*)$", dest.read_text(encoding="utf-8"), re.M)
                if anchor not in {_anchor(h) for h in headings}:
                    broken.append(f"{page.name}: {target} (no such heading)")
    assert broken == []


def test_anchor_follows_github():
    assert _anchor("Decoding on the CPU") == "decoding-on-the-cpu"
    assert _anchor("The `seqmap serve` page: routes, limits") == "the-seqmap-serve-page-routes-limits"


def test_readme_keeps_the_two_front_door_commands_verbatim():
    """.ci/main_job runs the first bash block's seqmap commands; the second is the test command."""
    blocks = _blocks(README.read_text(encoding="utf-8"), "bash")
    assert blocks[0].strip() == MAIN_JOB
    assert blocks[1].strip() == TEST_COMMAND


def test_readme_own_text_config_is_the_shipped_file_and_loads():
    shipped = (ROOT / "configs" / "own_text.yaml").read_text(encoding="utf-8")
    assert shipped in [block for block in _blocks(README.read_text(encoding="utf-8"), "yaml")]
    cfg = load_config(ROOT / "configs" / "own_text.yaml")
    assert cfg.train.warmup < cfg.train.max_steps <= 1000


def test_readme_is_a_front_door():
    """At most about 250 lines, and nothing a newcomer cannot use: no timestamps, no internal tools or paths."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    assert not re.search(r"\b\d\d:\d\d(:\d\d)?\b", text)  # clock times
    for internal in ("../shared", "/work/", "newcomer-check"):
        assert internal not in text
    for page in PAGES:
        assert "../shared" not in page.read_text(encoding="utf-8"), page.name


def test_docs_tables_have_as_many_cells_in_every_row_as_in_their_header():
    ragged = []
    for page in PAGES:
        width = None
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            if not line.startswith("|"):
                width = None
                continue
            cells = len(re.split(r"(?<!\\)\|", line.strip())) - 2
            if width is None:
                width = cells
            elif cells != width:
                ragged.append(f"{page.name}:{number}: {cells} cells, the header has {width}")
    assert ragged == []
