"""The classes of a classification task: label names <-> ids, chosen from the training labels, saved with a run.

    labels = LabelSet.from_training([label for _, label in train], max_classes=8)
    ids = [labels.encode(label, where=f"data.valid line {n}") for n, (_, label) in enumerate(valid, 1)]
    labels.save(run_dir / "labels.json");  LabelSet.load(run_dir / "labels.json")

Without ``max_classes`` every training label is a class, in sorted order, and a validation or test
label that training never saw is an error naming it. With ``max_classes=K`` and more labels than
that, the K - 1 most frequent training labels are classes and every other label, seen or not, joins
one class named ``other`` (the last id); ``LabelSet.merged`` lists which labels went there, so the
log can say so. Nothing is dropped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from seqmap.data.corpus import DataError


@dataclass(frozen=True)
class LabelSet:
    """Class names in id order; ``other``: the class that every label outside ``names`` joins (None: an error)."""

    names: tuple[str, ...]
    other: str | None = None
    merged: tuple[str, ...] = ()  # training labels that joined ``other`` (for the log)

    def __post_init__(self) -> None:
        if len(self.names) < 2:
            raise DataError(f"a classifier needs at least 2 classes; the training labels give {len(self.names)} "
                            f"({', '.join(self.names) or 'none'})")
        if len(set(self.names)) != len(self.names):
            raise DataError("class names must be distinct")
        if self.other is not None and self.other != self.names[-1]:
            raise DataError(f"the catch-all class {self.other!r} must be the last class")

    @classmethod
    def from_training(cls, labels: Iterable[str] | Mapping[str, int], max_classes: int | None = None,
                      other: str = "other") -> LabelSet:
        """The classes of a training split's labels, or of each label's count (see the module docstring for
        ``max_classes``)."""
        counts = Counter(labels)
        if "" in counts:
            raise DataError(f"{counts['']} training example(s) have an empty label; give every example a label")
        if max_classes is not None and max_classes < 2:
            raise DataError(f"data.max_classes must be at least 2, got {max_classes}")
        if max_classes is None or len(counts) <= max_classes:
            return cls(tuple(sorted(counts)))
        ranked = sorted(counts, key=lambda name: (-counts[name], name))  # most frequent first; ties by name
        kept, merged = ranked[: max_classes - 1], ranked[max_classes - 1:]
        if other in kept:
            raise DataError(f"the training labels already hold a frequent class named {other!r}; the catch-all "
                            f"class needs another name")
        return cls((*kept, other), other, tuple(sorted(merged)))

    def __len__(self) -> int:
        return len(self.names)

    def encode(self, label: str, where: str = "") -> int:
        """The id of ``label``; a label outside the classes joins ``other``, or is an error naming ``where``."""
        index = self._index.get(label)
        if index is not None:
            return index
        if self.other is not None:
            return len(self.names) - 1
        at = f"{where}: " if where else ""
        raise DataError(f"{at}label {label!r} is not one of the {len(self.names)} classes seen in training "
                        f"({_shown(self.names)}); fix the label, or add examples of it to the training data")

    def decode(self, index: int) -> str:
        return self.names[index]

    @cached_property
    def _index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    # -- files -------------------------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        data = {"names": list(self.names), "other": self.other, "merged": list(self.merged)}
        Path(path).write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> LabelSet:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            return cls(tuple(data["names"]), data.get("other"), tuple(data.get("merged", ())))
        except FileNotFoundError:
            raise DataError(f"{path}: the run's class list is missing (a classifier run keeps it there); "
                            "is this a classifier run directory?") from None
        except (ValueError, KeyError, TypeError) as e:
            raise DataError(f"{path}: not a seqmap class list ({e}); re-create the run, or restore the file") from None


def _shown(names: tuple[str, ...], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f", ... ({len(names) - most} more)" if len(names) > most else "")
