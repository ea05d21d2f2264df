"""``tokenload demo``: start a local streaming target, run a short headless Locust test with the
LLM user against it, and print the LLM metrics table. No GPU, no network beyond loopback."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from tokenload.results.rundir import make_run_dir
from tokenload.serving.process import ServerProcess

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tokenload demo", description=__doc__)
    p.add_argument("--users", type=int, default=16)
    p.add_argument("--run-time", default="15s")
    p.add_argument("--locustfile", default="locustfiles/chat.py")
    args = p.parse_args(argv)
    locustfile = Path(args.locustfile)
    if not locustfile.exists():
        print(
            f"tokenload demo: --locustfile: {locustfile} does not exist (run from the repository root)",
            file=sys.stderr,
        )
        return 2
    run_dir = make_run_dir(None)
    locust_bin = shutil.which("locust", path=str(Path(sys.executable).parent)) or "locust"
    target = ["-m", "tokenload.sim", "--port", "0", "--trace", str(run_dir / "server_trace.jsonl")]
    with ServerProcess(target, log_path=run_dir / "target.log") as srv:
        print(f"target: tokenload sim (vLLM emulator, A40 / Qwen2.5-7B profile) at {srv.url}", flush=True)
        cmd = [
            locust_bin, "-f", str(locustfile), "--host", srv.url, "--headless", "--only-summary",
            "-u", str(args.users), "-r", str(args.users), "-t", args.run_time, "--stop-timeout", "10",
            "--run-dir", str(run_dir), "--prompt-tokens", "256", "--output-tokens", "64",
            "--html", str(run_dir / "locust.html"), "--csv", str(run_dir / "locust"),
        ]  # fmt: skip
        print("running:", " ".join(cmd), flush=True)
        rc = subprocess.call(cmd)
    print(f"\nrun directory: {run_dir}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
