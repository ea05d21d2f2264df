"""The ``tokenload`` command line. Each subcommand lives in its own module; this file only routes."""

from __future__ import annotations

import os
import sys

__all__ = ["main"]

_COMMANDS = {
    "sim": ("tokenload.sim.main", "the built-in vLLM emulator (the default target; no GPU needed)"),
    "sweep": (
        "tokenload.sweep",
        "run a load shape headless on Locust and write reports/<run-id>/summary.json",
    ),
    "plan": ("tokenload.plan", "predict a sweep in seconds: the emulator in simulated time, judged as a run"),
    "calibrate": (
        "tokenload.calibrate",
        "fit an emulator profile to runs measured against your server (a digital twin)",
    ),
    "mock": ("tokenload.mock.server", "a fixed-schedule streaming server with ground truth and faults"),
    "demo": ("tokenload.demo", "start a local target and run a short headless Locust test against it"),
    "report": ("tokenload.report.main", "rebuild a run's report.md, report.html, parquet; SLO and capacity"),
    "compare": ("tokenload.compare", "compare two run directories step by step; exit 1 on a regression"),
}


def _usage() -> str:
    lines = ["usage: tokenload COMMAND [ARGS]", "", "commands:"]
    width = max(map(len, _COMMANDS))
    lines += [f"  {name:<{width}} {desc}" for name, (_, desc) in _COMMANDS.items()]
    lines.append(
        "\n'tokenload COMMAND --help' for a command's options; 'locust -f locustfiles/...' for Locust itself."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd not in _COMMANDS:
        print(f"tokenload: unknown command {cmd!r}; available: {', '.join(_COMMANDS)}", file=sys.stderr)
        return 2
    import importlib

    module = importlib.import_module(_COMMANDS[cmd][0])
    try:
        return int(module.main(rest) or 0)
    except BrokenPipeError:
        # The reader went away (`tokenload plan ... | head`): stop quietly, as a Unix tool does;
        # stdout goes to /dev/null so the interpreter's last flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
