"""Output paths a command is given (``--out``, ``--dest``): what stops one from being made."""

from __future__ import annotations

import os
from pathlib import Path


def file_above(path: str | os.PathLike) -> Path | None:
    """The nearest existing path above ``path`` when it is a file, not a folder (so ``path`` cannot be made under
    it), else None. Relative paths stay relative, so a message shows them as the user gave them."""
    above = next((p for p in Path(path).parents if p.exists()), None)
    return above if above is not None and not above.is_dir() else None
