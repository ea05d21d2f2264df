"""The argparse parser of tokenload's own commands: a usage error is one line naming what was
wrong (no usage block), exit status 2."""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

__all__ = ["OneLineParser", "usage_error"]


def usage_error(message: str) -> str:
    """argparse's message, with a hint where argparse's own wording misleads."""
    if message.endswith("expected one argument"):
        # argparse reads a value that starts with '-' (--sim-args "--profile x") as a flag.
        message += " (a value that starts with '-' goes after '=': --sim-args='--profile ...')"
    return message


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``PROG: message``) with exit status 2, and a
    description taken from a module docstring shows its ````code```` as `code` in --help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if isinstance(kwargs.get("description"), str):
            kwargs["description"] = kwargs["description"].replace("``", "`")
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {usage_error(message)}\n")
