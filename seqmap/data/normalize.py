"""Text normalization applied before tokenizing: lowercasing and Chinese script conversion (OpenCC).

One ``TextNormalizer`` is built from the data config, applied to every split's sources,
targets and references when the data is read, and saved with the tokenizer, whose
``encode`` applies it again. So a run trained on Simplified Chinese reads a
Traditional input at ``translate``, ``serve`` or ``evaluate`` time the same way it read
its training text, and ``evaluate`` scores against references converted the same way.

Both steps are idempotent (converting Simplified text to Simplified changes nothing),
so text normalized at reading time passes through the tokenizer unchanged.

OpenCC (https://github.com/BYVoid/OpenCC, Apache-2.0) converts by phrase and by
character tables; its conversions are named by their config, e.g. ``t2s``
(Traditional to Simplified), ``s2t``, ``tw2s`` (Taiwan standard to Simplified),
``hk2s``, ``s2twp`` (with Taiwan phrases).
"""

from __future__ import annotations

import functools
from typing import Any

OPENCC_CONVERSIONS = ("t2s", "s2t", "tw2s", "s2tw", "hk2s", "s2hk", "tw2sp", "s2twp", "t2tw", "tw2t",
                      "t2hk", "hk2t", "t2jp", "jp2t")


class NormalizerError(ValueError):
    """A normalization cannot be set up; the message says what to change."""


@functools.lru_cache(maxsize=8)
def _opencc(conversion: str):
    try:
        import opencc
    except ImportError:
        raise NormalizerError(f"data.opencc={conversion!r} needs the OpenCC package; pip install opencc") from None
    try:
        return opencc.OpenCC(f"{conversion}.json")
    except RuntimeError as err:  # the installed OpenCC lacks this table
        raise NormalizerError(f"OpenCC cannot load the conversion {conversion!r} ({err}); "
                              f"choose one of {list(OPENCC_CONVERSIONS)}") from None


class TextNormalizer:
    """``lowercase`` then ``opencc`` conversion; with neither it returns text unchanged."""

    def __init__(self, *, lowercase: bool = False, opencc: str | None = None) -> None:
        if opencc is not None and opencc not in OPENCC_CONVERSIONS:
            raise NormalizerError(f"unknown OpenCC conversion {opencc!r}; choose one of {list(OPENCC_CONVERSIONS)}")
        self.lowercase = lowercase
        self.opencc = opencc
        self._converter = _opencc(opencc) if opencc else None

    def __call__(self, text: str) -> str:
        if self.lowercase:
            text = text.lower()
        if self._converter is not None:
            text = self._converter.convert(text)
        return text

    @property
    def identity(self) -> bool:
        return not self.lowercase and self.opencc is None

    def to_dict(self) -> dict[str, Any]:
        return {"lowercase": self.lowercase, "opencc": self.opencc}

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> TextNormalizer:
        data = data or {}
        unknown = set(data) - {"lowercase", "opencc"}
        if unknown:
            raise NormalizerError(f"unknown normalizer option(s) {sorted(unknown)}; this seqmap knows lowercase, "
                                  "opencc (was the tokenizer saved by a newer seqmap?)")
        return cls(lowercase=bool(data.get("lowercase", False)), opencc=data.get("opencc"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextNormalizer) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash((self.lowercase, self.opencc))

    def __repr__(self) -> str:
        return f"TextNormalizer(lowercase={self.lowercase}, opencc={self.opencc!r})"


IDENTITY = TextNormalizer()
