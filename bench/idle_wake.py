"""How late an idle server reads a request: back-to-back requests against requests after a pause.

Against ``tokenload sim`` (its trace's ``arrival_s`` is when the engine got the request, on
CLOCK_MONOTONIC like this process's ``perf_counter``), one kept-alive connection, one request at
a time (a 121-token prompt, 4 output tokens). Each request is sent either right after the previous
response ended, or after both processes sat idle for ``--pause`` seconds; the figure is send ->
the emulator's arrival stamp, ms. On a VM whose idle vCPUs take milliseconds to wake, the paused
case is several ms later: the margin that client-vs-server timing checks sit on.

    python bench/idle_wake.py [--requests 20] [--pause 0.2]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from _harness import start_target


def _send_and_read(sock: socket.socket, request: bytes) -> float:
    t0 = time.perf_counter()
    sock.sendall(request)
    buf = b""
    while b"[DONE]" not in buf:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the emulator closed the connection")
        buf += data
    return t0


def run(requests: int, pause: float, trace: Path) -> dict:
    srv = start_target(["-m", "tokenload.sim", "--port", "0", "--trace", str(trace)])
    try:
        with urllib.request.urlopen(srv.url + "/v1/models", timeout=10) as r:
            model = json.load(r)["data"][0]["id"]
        body = json.dumps(
            {"model": model, "prompt": "a" * 120, "max_tokens": 4, "ignore_eos": True, "stream": True}
        ).encode()
        host, port = srv.url.split("//")[1].split(":")
        request = b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
            host.encode()
        ) + b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        sent: dict[str, list[float]] = {"back_to_back": [], "after_pause": []}
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _send_and_read(sock, request)  # warm-up
            for i in range(requests):
                kind = "after_pause" if i % 2 else "back_to_back"
                if kind == "after_pause":
                    time.sleep(pause)
                sent[kind].append(_send_and_read(sock, request))
    finally:
        srv.stop()
    arrivals = [json.loads(line)["arrival_s"] for line in trace.read_text().splitlines()][1:]
    order = sorted((t, k) for k, ts in sent.items() for t in ts)
    delays: dict[str, list[float]] = {"back_to_back": [], "after_pause": []}
    for (t0, kind), arrival in zip(order, arrivals, strict=True):
        delays[kind].append((arrival - t0) * 1000)
    return {
        kind: {"requests": len(v), "send_to_arrival_ms_p50": round(statistics.median(v), 3)}
        for kind, v in delays.items()
    } | {"pause_s": pause}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--pause", type=float, default=0.2)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="idle-wake-") as d:
        print(json.dumps(run(args.requests, args.pause, Path(d) / "trace.jsonl"), indent=2))


if __name__ == "__main__":
    main()
