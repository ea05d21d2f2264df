"""When received bytes reached this host: the kernel's receive timestamp, not the read's.

A process that reads a socket learns of new bytes only when it next runs; on a busy or idle
machine that can be milliseconds after they arrived (a 2-core VM woke an idle reader 2-8 ms
late, ``bench/idle_wake.py``). Linux stamps every received packet as it is delivered
(``SO_TIMESTAMPNS``, also for TCP: the stamp of the last packet a read consumed comes with
``recvmsg``), so a reader can date its bytes exactly, whenever it gets to them. Over loopback
the stamp is taken inside the sender's ``send`` call.

The stamp is wall-clock (``CLOCK_REALTIME``) and becomes a ``perf_counter`` time through the
offset between the two clocks, taken at the read as ``time() - perf_counter()`` with the
``perf_counter`` read *after* ``time()``: a preemption between the two calls then dates the
bytes later, never earlier (read the other way round, this VM dated one read in a few hundred
0.1-0.4 ms too early). NTP's slew while bytes wait is at most 0.05 % of the wait. Measured over
loopback on this VM, ~2,000 sends in 20 s against a perf_counter taken before each (three runs):
never early, median 1.6-4.4 us after the send began (``tests/unit/test_rxstamp.py`` checks the
"never early" with a late reader).

A read that takes several packets at once (a reader more than one token gap behind) gets the
last one's stamp for all of them: its earlier chunks are then dated up to one gap late, never
early, and still no later than the read itself. Where there is no stamp (not Linux, a TLS
socket, a stamp out of range), the read's own time is used, as before.
"""

from __future__ import annotations

import socket
import struct
import sys
import time

__all__ = ["AVAILABLE", "enable", "recv"]

# Linux's generic value (asm-generic/socket.h); Python's socket module does not name it.
_SO_TIMESTAMPNS = 35
#: Whether this platform stamps received bytes (Linux); elsewhere read plain ``recv``.
AVAILABLE = sys.platform.startswith("linux")
_TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if AVAILABLE else 0
#: A stamp older than this (or from the future) means the wall clock moved: not trusted.
_MAX_AGE_S = 60.0


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what ``sock`` receives; False where it cannot (read times then)."""
    if not AVAILABLE:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def recv(sock: socket.socket, n: int, stamped: bool = True) -> tuple[bytes, float]:
    """``sock.recv(n)`` and the ``perf_counter`` time its last bytes reached the host.

    With ``stamped``, ``sock`` must be a plain socket (TLS sockets have no ``recvmsg``) on a
    platform where :data:`AVAILABLE`, :func:`enable`-d; otherwise the read's own time is returned.
    """
    if not stamped:
        return sock.recv(n), time.perf_counter()
    data, ancillary, _flags, _addr = sock.recvmsg(n, _CMSG_SPACE)
    now = time.perf_counter()
    if not ancillary:
        return data, now
    offset = time.time() - time.perf_counter()  # in this order: see the module doc
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            t = sec + nsec * 1e-9 - offset
            if now - _MAX_AGE_S < t <= now:
                return data, t
    return data, now
