"""How a command refuses what it was given: the user error (one line, exit status 2), the exit statuses, and
command-line text that is not UTF-8."""

from __future__ import annotations

USAGE_ERROR = 2
INTERRUPTED_STATUS = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit status 2."""


def check_text(text: str, where: str) -> None:
    """A command-line argument that is not UTF-8 (Python hands its bytes over as lone surrogates) is one error."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        raise UserError(f"{where} is not valid UTF-8 (character {err.start + 1} is not text); "
                        "give it in UTF-8, e.g. convert it with iconv -t utf-8") from None
