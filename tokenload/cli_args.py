"""The argparse parser of tokenload's own commands: a usage error is one line naming what was
wrong (no usage block), exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["OneLineParser", "usage_error"]


def usage_error(message: str) -> str:
    """argparse's message, with a hint where argparse's own wording misleads."""
    if message.endswith("expected one argument"):
        # argparse reads a value that starts with '-' (--sim-args "--profile x") as a flag.
        message += " (a value that starts with '-' goes after '=': --sim-args='--profile ...')"
    return message


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``PROG: message``) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {usage_error(message)}\n")
