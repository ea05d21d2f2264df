"""Receive stamps while the wall clock is being set: the read's offset against the interpolated one.

A kernel receive stamp is wall-clock time (``tokenload/rxstamp.py``). CI's VM once dated five
loopback sends 0.43-0.47 ms before they began, each read 100 ms late: its wall clock gained on
``perf_counter`` while the bytes waited. This reproduces that on purpose: a thread sets the wall
clock 44 us ahead every 10 ms (+0.44 % asked; each run prints the gain it reached,
``wall_clock_gain_percent``, lower where the thread wakes late; ``clock_settime``, so it needs root
and leaves this host's wall clock about ``--sends`` x 0.44 ms ahead), while one socket sends 100
bytes and another reads them 100 ms later. Each stamp is converted both ways in one run: with the
offset read at the read (before 05ad473) and by ``rxstamp.wall_to_perf`` (the offset interpolated to the
arrival). The figure is stamp - perf_counter before the send, us: negative is dated before the
send began (sends the kernel did not stamp are counted, not dated). Loopback only; bounded by ``--sends``.

    sudo python bench/rxstamp_clock_step.py [--sends 20]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tokenload import rxstamp

STEP_S, EVERY_S = 44e-6, 0.01


def _step_clock(stop: threading.Event) -> None:
    while not stop.wait(EVERY_S):
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) + STEP_S)


def run(sends: int, step: bool) -> dict:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sender = socket.create_connection(listener.getsockname())
        reader, _ = listener.accept()
    stop = threading.Event()
    stepper = threading.Thread(target=_step_clock, args=(stop,), daemon=True)
    at_read, interpolated = [], []
    unstamped = 0
    with sender, reader:
        assert rxstamp.enable(reader)
        before = first = rxstamp.clock_sample()
        if step:
            stepper.start()
        try:
            for _ in range(sends):
                t_send = time.perf_counter()
                sender.sendall(b"x" * 100)
                time.sleep(0.1)
                _data, anc, _f, _a = reader.recvmsg(4096, socket.CMSG_SPACE(16))
                now = rxstamp.clock_sample()
                if not anc:  # net_enable_timestamp() turns stamping on in a deferred work item
                    unstamped += 1
                    continue
                sec, nsec = struct.unpack_from("@qq", anc[0][2])
                wall = sec + nsec * 1e-9
                at_read.append((wall - now[1] - t_send) * 1e6)
                interpolated.append((rxstamp.wall_to_perf(wall, before, now) - t_send) * 1e6)
                before = now
        finally:
            stop.set()
            if step:
                stepper.join()
        last = rxstamp.clock_sample()
    gain = (last[1] - first[1]) / (last[0] - first[0]) * 100

    def figures(xs: list[float]) -> dict:
        return {"median_us": round(statistics.median(xs), 1), "min_us": round(min(xs), 1),
                "early": sum(x < 0 for x in xs)}  # fmt: skip

    return {"wall_clock_stepped": step, "wall_clock_gain_percent": round(gain, 3), "sends": sends,
            "unstamped": unstamped,
            "offset_at_read": figures(at_read), "interpolated": figures(interpolated)}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sends", type=int, default=20)
    args = ap.parse_args()
    if not rxstamp.AVAILABLE:
        print(json.dumps({"error": "kernel receive stamps are Linux-only"}))
        return 1
    try:
        time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME))
    except PermissionError:
        print(json.dumps({"error": "setting the wall clock needs root (CAP_SYS_TIME)"}))
        return 1
    print(json.dumps({"runs": [run(args.sends, False), run(args.sends, True)]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
