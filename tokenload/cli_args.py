"""The argparse parser of tokenload's own commands: a usage error is one line naming what was
wrong (no usage block), exit status 2."""

from __future__ import annotations

import argparse
from typing import NoReturn

__all__ = ["OneLineParser"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``PROG: message``) with exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")
