"""When received bytes reached this host: the kernel's receive timestamp, not the read's.

A process that reads a socket learns of new bytes only when it next runs; on a busy or idle
machine that can be milliseconds after they arrived (a 2-core VM woke an idle reader 2-8 ms
late, ``bench/idle_wake.py``). Linux stamps every received packet as it is delivered
(``SO_TIMESTAMPNS``, also for TCP: the stamp of the last packet a read consumed comes with
``recvmsg``), so a reader can date its bytes exactly, whenever it gets to them. Over loopback
the stamp is taken inside the sender's ``send`` call.

The stamp is wall-clock (``CLOCK_REALTIME``) and becomes a ``perf_counter`` time through the
offset between the two clocks, read as ``time() - perf_counter()`` with the ``perf_counter`` read
*after* ``time()``: a preemption between the two calls then dates the bytes later, never earlier
(read the other way round, this VM dated one read in a few hundred 0.1-0.4 ms too early).
NTP's slewing moves both clocks alike, but a wall clock that is *set* (stepped) moves against
``perf_counter``, and a read that comes late converts an old stamp with a new offset. CI's VM did
this steadily: a reader 100 ms late dated five sends 0.43-0.47 ms before they began (its wall
clock gained about 0.44 % on ``perf_counter``). So the offset is sampled at every stamped read and
at :func:`enable`, and a stamp is converted with the offset interpolated, between the last sample
and this read's, to the time the bytes arrived (:func:`wall_to_perf`): exact while the wall clock
drifts evenly, and otherwise wrong by no more than the wall clock moved during the wait. Measured
over loopback on this VM (no such drift), ~2,000 sends in 20 s against a perf_counter taken before
each (three runs): never early, median 1.6-4.4 us after the send began (``tests/unit/
test_rxstamp.py`` checks a late reader against the wall clock's own movement, and the
interpolation against a planted drift and a planted step).

Linux stamps packets only while some socket on the host asks for stamps, and turns stamping on
in a deferred work item (``net_enable_timestamp``). A socket that asked just now may get its
first packets unstamped, and when the last such socket closes, stamping goes off again. On this
VM, 300 fresh loopback sockets opened one after another, each closed before the next: the first
packet was unstamped on 296 and 268 of them (two runs), and on none with one stamping socket held
open throughout. So :func:`keep_on` holds one such socket for the process's life: :func:`enable`
calls it, and so do the client and the emulator as they start, before their first connection
(``tests/unit/test_rxstamp.py`` checks fresh sockets' first packets).

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

__all__ = ["AVAILABLE", "clock_sample", "enable", "keep_on", "recv", "wall_to_perf"]

# Linux's generic value (asm-generic/socket.h); Python's socket module does not name it.
_SO_TIMESTAMPNS = 35
#: Whether this platform stamps received bytes (Linux); elsewhere read plain ``recv``.
AVAILABLE = sys.platform.startswith("linux")
_TIMESPEC = struct.Struct("@qq")
_CMSG_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if AVAILABLE else 0
#: A stamp older than this (or from the future) means the wall clock moved: not trusted.
_MAX_AGE_S = 60.0
#: A socket that asks for stamps for the process's life, so the kernel keeps stamping on.
_keeper: socket.socket | None = None
#: The last sample of the clocks: ``(perf_counter, time() - perf_counter())``.
_last_offset: tuple[float, float] | None = None


def clock_sample() -> tuple[float, float]:
    """``(perf_counter, time() - perf_counter())``: the two clocks read in the order the
    conversion assumes (see the module doc), the sample :func:`wall_to_perf` takes."""
    wall = time.time()
    perf = time.perf_counter()
    return perf, wall - perf


def _sample_offset() -> tuple[float, float]:
    """:func:`clock_sample`, kept as the last sample for the next stamped read."""
    global _last_offset
    sample = _last_offset = clock_sample()
    return sample


def wall_to_perf(wall: float, before: tuple[float, float] | None, now: tuple[float, float]) -> float:
    """The wall-clock time ``wall`` as a ``perf_counter`` time.

    ``before`` and ``now`` are samples ``(perf_counter, time() - perf_counter())``, ``before`` the
    one taken earlier (None where there is none). The offset between the clocks is interpolated
    linearly to ``wall``'s moment between them; ``before``'s is used for a moment before it, and
    ``now``'s where there is no earlier sample.
    """
    t = wall - now[1]
    if before is None:
        return t
    p0, off0 = before
    if t <= p0:
        return wall - off0
    span = now[0] - p0
    if span <= 0:
        return t
    return wall - (off0 + (now[1] - off0) * min(1.0, (t - p0) / span))


def keep_on() -> bool:
    """Keep the kernel's receive stamping on for this process's life (see the module doc): one
    UDP socket that asks for stamps and is never used. Idempotent; False where there are none."""
    global _keeper
    if _keeper is not None:
        return True
    if not AVAILABLE:
        return False
    try:
        keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    except OSError:
        return False
    try:
        keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        keeper.close()
        return False
    _keeper = keeper
    return True


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what ``sock`` receives; False where it cannot (read times then)."""
    if not AVAILABLE:
        return False
    keep_on()
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    _sample_offset()
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
    before = _last_offset
    sample = _sample_offset()
    for level, kind, raw in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            t = wall_to_perf(sec + nsec * 1e-9, before, sample)
            if now - _MAX_AGE_S < t <= now:
                return data, t
    return data, now
