"""The machine's floor under the emulator's token lateness: the same burst of writes with nothing
else to do. A bare sender pinned to one core makes one non-blocking loopback ``send`` per stream
at every step's end (a fixed step period), a reader pinned to the other core drains every stream,
and each write's start is compared with its step's end exactly as the emulator does. What this
sender reports late, any single-core server on this machine would: the kernel's loopback send path
(which also runs the receiver's TCP processing on the sender's core) and the host's stalls.

``bench/sim_capacity.py`` runs it next to each emulator level (same stream count, the step period
and chunk size the emulator had); alone: ``python bench/send_floor.py --streams 1000``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import time

from _harness import CLIENT_CPU, SERVER_CPU, pct, rounded

#: Bound on every probe: a stuck reader cannot hold the bench.
_MAX_SECONDS = 120.0


def _reader(port: int, streams: int, work_s: float) -> None:
    os.sched_setaffinity(0, {CLIENT_CPU})
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(streams)]
    ep = select.epoll()
    by_fd = {}
    for s in socks:
        s.setblocking(False)
        ep.register(s.fileno(), select.EPOLLIN)
        by_fd[s.fileno()] = s
    open_ = len(socks)
    deadline = time.monotonic() + _MAX_SECONDS + 30
    while open_ and time.monotonic() < deadline:
        for fd, _ in ep.poll(1.0):
            try:
                data = by_fd[fd].recv(65536)
            except BlockingIOError:
                continue
            if not data:
                ep.unregister(fd)
                open_ -= 1
                continue
            # What a real client spends on a chunk (parsing it, recording its timing).
            busy_until = time.perf_counter() + work_s
            while time.perf_counter() < busy_until:
                pass


def measure(streams: int, seconds: float, step_s: float, chunk_bytes: int, reader_work_s: float) -> dict:
    """Lateness (ms) of each write's start against its step's end, and the burst's length."""
    seconds = min(seconds, _MAX_SECONDS)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(streams + 16)
    port = listener.getsockname()[1]
    pid = os.fork()
    if pid == 0:
        try:
            listener.close()
            _reader(port, streams, reader_work_s)
        finally:
            os._exit(0)
    os.sched_setaffinity(0, {SERVER_CPU})
    conns = []
    try:
        listener.settimeout(30)
        for _ in range(streams):
            c, _ = listener.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            c.setblocking(False)
            conns.append(c)
        chunk = b"x" * chunk_bytes
        sends = [c.send for c in conns]
        clock = time.perf_counter
        late: list[float] = []
        bursts: list[float] = []
        due = clock() + step_s
        end = due + seconds
        while due < end:
            if (wait := due - clock() - 0.001) > 0:
                time.sleep(wait)
            while clock() < due:
                pass
            stamps = []
            append = stamps.append
            for send in sends:
                t = clock()
                try:
                    send(chunk)
                except BlockingIOError:
                    pass  # a slow reader: this token is skipped, as the emulator would queue it
                append(t)
            t_end = clock()
            late.extend((t - due) * 1000.0 for t in stamps)
            bursts.append((t_end - stamps[0]) * 1000.0)
            due += step_s
            if clock() > due:  # never fall behind: the next step ends a period after this burst
                due = clock() + step_s
    finally:
        for c in conns:
            c.close()
        listener.close()
        os.waitpid(pid, 0)
    return {
        "streams": streams,
        "step_ms": rounded(step_s * 1000.0),
        "writes": len(late),
        "lateness_ms": {
            "p50": rounded(pct(late, 0.5)),
            "p99": rounded(pct(late, 0.99)),
            "max": rounded(max(late)),
        },
        "burst_ms": {"p50": rounded(pct(bursts, 0.5)), "p99": rounded(pct(bursts, 0.99))},
        "us_per_send_p50": rounded(pct(bursts, 0.5) * 1000.0 / streams),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--step-ms", type=float, default=25.0)
    p.add_argument("--chunk-bytes", type=int, default=230)
    p.add_argument(
        "--reader-us", type=float, default=9.0, help="reader CPU per chunk (tokenload's client: ~9)"
    )
    a = p.parse_args()
    print(
        json.dumps(
            measure(a.streams, a.seconds, a.step_ms / 1000.0, a.chunk_bytes, a.reader_us / 1e6), indent=2
        )
    )


if __name__ == "__main__":
    main()
