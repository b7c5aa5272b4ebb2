"""The import graph of ``seqmap``: no cycles, imports flow one way (down the layers), no private names across modules.

Every module under ``seqmap/`` is parsed with ``ast``; every import counts, those inside
functions and under ``if TYPE_CHECKING:`` included, since a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "seqmap"

# The layers, lowest first: a module may import from its own layer and the layers before it, never after.
# A module belongs to the entry that names it or its nearest enclosing package.
LAYERS: list[tuple[str, ...]] = [
    ("seqmap", "seqmap.paths", "seqmap.provenance"),  # the package docstring (shape legend, mask convention),
    #                                                  __version__; output paths; where a run was trained
    ("seqmap.nn",),  # attention and positional primitives, layers
    ("seqmap.data",),  # text, tokenizers, corpora, batches, synthetic tasks
    ("seqmap.config", "seqmap.config_io", "seqmap.tasks.registry"),  # typed configs (they check choices against
    #                          names defined in nn, data and the task registry); YAML, overrides and dict
    #                          (de)serialisation; what each data.task is, without its code
    ("seqmap.checkpoints",),  # saving and loading checkpoints, their rotation and averaging
    ("seqmap.models", "seqmap.data.pipeline"),  # models built from a config; a data config to token ids
    ("seqmap.decoding",),  # greedy, beam, sampling over the model protocol; text in, text out
    ("seqmap.metrics",),  # sacreBLEU scores and perplexity
    ("seqmap.runs",),  # open a trained run (its checkpoint, config and tokenizer) for use
    ("seqmap.hub",),  # pretrained models from (and to) the Hugging Face format, as run directories
    ("seqmap.training",),  # the trainer, its loss, schedules, validation; the toy run
    ("seqmap.evaluation", "seqmap.speech_evaluation", "seqmap.visualize"),  # a trained run: test scores, plots
    ("seqmap.tasks",),  # one module per data.task: its data, batches, validation and test scoring
    ("seqmap.training.run_trainer",),  # a config on real data, trained into a run directory through its task
    ("seqmap.serve",),  # the HTTP API
    ("seqmap.cli", "seqmap.__main__"),  # the command line, on top of everything
]


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (a package is its ``__init__.py``)."""
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for each seqmap import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name.split(".")[0] == "seqmap"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolved against the module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "seqmap":
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"  # `from seqmap.training import checkpoint`
                found.append((submodule, None, node.lineno) if submodule in MODULES else
                             (source, alias.name, node.lineno))
    return found


def _resolve(name: str) -> str:
    """The module of the package that ``import name`` runs last (a name that is no module: its package)."""
    while name not in MODULES:
        name, _, _ = name.rpartition(".")
        assert name, "an import of something outside the package"
    return name


@functools.cache  # parsed once: the tests only read it
def _graph() -> dict[str, set[str]]:
    return {m: {_resolve(target) for target, _, _ in _imports(m)} - {m} for m in MODULES}


def _layer(module: str) -> int:
    """Index in LAYERS of the entry naming ``module`` or its nearest package (only ``seqmap`` names the root)."""
    best, best_len = None, -1
    for i, names in enumerate(LAYERS):
        for name in names:
            inside = module == name or (name != "seqmap" and module.startswith(name + "."))
            if inside and len(name) > best_len:
                best, best_len = i, len(name)
    assert best is not None, f"{module} is in no layer: add it (or its package) to LAYERS in {__file__}"
    return best


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return components


def test_the_graph_sees_every_kind_of_import():
    """The parser itself: module-level, function-level, submodule and name imports all resolve."""
    graph = _graph()
    assert len(MODULES) > 50 and "seqmap.cli" in MODULES
    assert "seqmap.data.tokenizers" in graph["seqmap.data.batching"]  # from seqmap.data.tokenizers import PAD
    assert "seqmap.metrics" in graph["seqmap.training.validate"]  # from seqmap import metrics as mt
    assert "seqmap.training.run_trainer" in graph["seqmap.cli.train"]  # imported inside the command function


def _reached(graph: dict[str, set[str]], module: str) -> dict[str, str | None]:
    """Every module that importing ``module`` runs, directly or through others, each with the module that imports
    it (None for ``module``). Importing ``seqmap.a.b`` also runs the package ``seqmap.a`` (its ``__init__.py``)."""
    came_from: dict[str, str | None] = {module: None}
    todo = [module]
    while todo:
        current = todo.pop(0)
        parts = current.split(".")
        packages = {".".join(parts[:i]) for i in range(1, len(parts))} & MODULES.keys()
        for target in sorted(graph[current] | packages):
            if target not in came_from:
                came_from[target] = current
                todo.append(target)
    return came_from


# translating, serving and importing open runs and checkpoints, and never need the training code to do so
NOT_TRAINING = ("seqmap.runs", "seqmap.hub", "seqmap.serve", "seqmap.decoding", "seqmap.checkpoints")


def test_reached_follows_imports_and_packages():
    """The helper itself: a function-level import and the package of a module it imports both count."""
    reached = _reached(_graph(), "seqmap.cli.train")
    assert reached["seqmap.training.run_trainer"] == "seqmap.cli.train"  # imported inside the command function
    reached = _reached(_graph(), "seqmap.training.loss")  # imports nothing of seqmap.training itself, but
    assert reached["seqmap.training"] == "seqmap.training.loss"  # its package's __init__.py runs first
    assert "seqmap.training.toy" in reached  # and what that imports


@pytest.mark.parametrize("module", [m for m in sorted(MODULES) if m.startswith(tuple(p + "." for p in NOT_TRAINING))
                                    or m in NOT_TRAINING])
def test_inference_does_not_depend_on_training(module):
    reached = _reached(_graph(), module)
    first = next((m for m in reached if m == "seqmap.training" or m.startswith("seqmap.training.")), None)
    if first is not None:  # the nearest, with the imports that lead to it
        chain, m = [], first
        while m is not None:
            chain.append(m)
            m = reached[m]
        pytest.fail(f"{module} depends on {first}: {' -> '.join(reversed(chain))}; move what it needs below "
                    "seqmap.training (checkpoints: seqmap.checkpoints)")


def test_no_import_cycles():
    cycles = _cycles(_graph())
    assert not cycles, "modules that import each other, directly or through others: " + "; ".join(
        " <-> ".join(c) for c in cycles)


def test_imports_flow_down_the_layers():
    upward = []
    for module in MODULES:
        for target, _, line in _imports(module):
            target = _resolve(target)
            if _layer(target) > _layer(module):
                upward.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line} imports {target} "
                              f"(layer {_layer(target)} > {_layer(module)})")
    assert not upward, "imports against the layering (see LAYERS):\n" + "\n".join(upward)


def test_no_private_names_imported_from_other_modules():
    private = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line} imports {name} from {target}"
               for m in MODULES for target, name, line in _imports(m)
               if name is not None and name.startswith("_") and not name.startswith("__")]
    private += [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line} imports {target}"
                for m in MODULES for target, _, line in _imports(m)
                if any(part.startswith("_") and not part.startswith("__") for part in target.split("."))]
    assert not private, "private names used outside their module (make them public or move the code):\n" + \
        "\n".join(private)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_has_a_layer(module):
    _layer(module)
