"""The one error type of the workload layer: a single line naming the file, row or field at fault."""

from __future__ import annotations

from pathlib import Path

__all__ = ["PromptCountError", "WorkloadError", "describe", "read_text"]


class WorkloadError(ValueError):
    """A workload cannot be built; ``str()`` is one line meant for the user, never a traceback."""

    def __init__(self, message: str) -> None:
        # A multi-line message would break the one-line contract of the command line.
        super().__init__(" ".join(message.split()) if "\n" in message else message)


class PromptCountError(WorkloadError):
    """Counting one prompt's tokens failed for a reason that may pass (the server's ``/tokenize``
    unreachable, timing out, or answering 429 or 5xx): that prompt fails, not the run."""


def describe(value: object, limit: int = 60) -> str:
    """A short, one-line rendering of a bad value for an error message."""
    text = repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_text(path: Path, where: str, missing: str = "no such file") -> str:
    """The file's text (UTF-8); a missing or unreadable file is a one-line WorkloadError that
    starts with ``where``."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise WorkloadError(f"{where}: {missing}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{where}: cannot read it ({type(exc).__name__})") from None
