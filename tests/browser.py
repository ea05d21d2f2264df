"""Headless Chromium for the tests that look at pages: the binary (skip with a reason, or fail
under CI), one bounded loopback-only run, its network log and console lines."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest


def find_chromium() -> str | None:
    env = os.environ.get("CHROMIUM")
    if env:
        return env
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def run_chromium(binary: str, profile: Path, *args: str, timeout_s: float = 90) -> tuple[str, str]:
    """One headless Chromium, loopback only (every other host name resolves to nothing)."""
    cmd = [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions", "--no-default-browser-check",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", *args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this call started (browser + its children)
        out, err = proc.communicate()
        pytest.fail(f"chromium did not finish within {timeout_s} s: {err[-2000:]}")
    assert proc.returncode == 0, err[-3000:]
    return out, err


def page_requests(net_log: Path) -> list[str]:
    """URLs of the requests the page made (the browser's own background requests left out: they
    carry no initiator and no page's network isolation key)."""
    data = json.loads(net_log.read_text())
    types = {v: k for k, v in data["constants"]["logEventTypes"].items()}
    urls = []
    for e in data["events"]:
        p = e.get("params") or {}
        if types.get(e["type"]) != "URL_REQUEST_START_JOB" or "url" not in p:
            continue
        page_made = p.get("initiator", "not an origin") != "not an origin" or "127.0.0.1" in p.get(
            "network_isolation_key", ""
        )
        if page_made:
            urls.append(p["url"])
    return urls


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]
