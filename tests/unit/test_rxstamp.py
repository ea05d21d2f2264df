"""Kernel receive stamps date bytes when they arrived, not when a late reader got to them."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tokenload import rxstamp

pytestmark = pytest.mark.skipif(not rxstamp.AVAILABLE, reason="kernel receive stamps are Linux-only")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        yield client, server


def test_a_late_read_is_dated_at_arrival(pair: tuple[socket.socket, socket.socket]) -> None:
    sender, reader = pair
    assert rxstamp.enable(reader)
    ages, moved = [], []
    for _ in range(5):
        offset_before = rxstamp.clock_sample()[1]
        t_send = time.perf_counter()
        sender.sendall(b"x" * 100)
        time.sleep(0.1)  # the reader is busy elsewhere for 100 ms
        data, t = rxstamp.recv(reader, 4096)
        assert data == b"x" * 100
        ages.append(t - t_send)
        moved.append(abs(rxstamp.clock_sample()[1] - offset_before))
    # Dated inside the send over loopback (a read's own time would be >= 100 ms after it), and
    # never before it by more than the wall clock moved against perf_counter while the bytes
    # waited: the conversion errs late only, but for a wall clock that is set (see the module doc;
    # CI's VM dated these sends 0.43-0.47 ms early with no interpolation).
    assert all(age >= -m for age, m in zip(ages, moved, strict=True)), (ages, moved)
    assert sorted(ages)[2] < 0.02, ages


def test_the_clocks_offset_is_interpolated_to_the_arrival() -> None:
    # A wall clock that gains 0.44 % on perf_counter (CI's VM), sampled at 10.0 s and read 100 ms
    # later: bytes that arrived at 10.03 s are dated then, where the read's offset alone would
    # date them 0.3 ms early.
    def sample(perf: float, gain: float = 0.0044) -> tuple[float, float]:
        return perf, 1_000.0 + gain * perf

    arrival = 10.03
    wall = arrival + sample(arrival)[1]
    before, now = sample(10.0), sample(10.1)
    assert wall - now[1] < arrival - 2.5e-4  # the read's offset alone: early
    assert rxstamp.wall_to_perf(wall, before, now) == pytest.approx(arrival, abs=5e-6)
    # Bytes that arrived before the earlier sample take its offset, the nearer one.
    early = 9.5
    assert rxstamp.wall_to_perf(early + sample(10.0)[1], before, now) == pytest.approx(early, abs=1e-9)
    # No earlier sample: the read's offset, as before.
    assert rxstamp.wall_to_perf(wall, None, now) == pytest.approx(wall - now[1], abs=1e-12)


def test_a_wall_clock_stepped_during_the_wait_errs_by_at_most_the_step() -> None:
    # The wall clock is set 1 ms ahead at 10.05 s, between the samples at 10.0 and 10.1 s.
    def offset_at(perf: float) -> float:
        return 1_000.0 + (0.001 if perf >= 10.05 else 0.0)

    before, now = (10.0, offset_at(10.0)), (10.1, offset_at(10.1))
    for arrival in (10.01, 10.04, 10.06, 10.09):
        t = rxstamp.wall_to_perf(arrival + offset_at(arrival), before, now)
        assert abs(t - arrival) <= 0.001 + 1e-9, arrival


def test_fresh_sockets_first_packets_are_stamped() -> None:
    # Sockets opened one after another, each closed before the next: without a socket that keeps
    # the kernel's stamping on, most first packets came unstamped (296 of 300 on this VM).
    assert rxstamp.keep_on()
    time.sleep(0.05)  # the kernel turns stamping on in a deferred work item
    unstamped = 0
    for _ in range(50):
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        with client, server:
            assert rxstamp.enable(server)
            client.sendall(b"z")
            time.sleep(0.001)
            _data, ancillary, _flags, _addr = server.recvmsg(16, socket.CMSG_SPACE(16))
            unstamped += not ancillary
        time.sleep(0.003)  # a pause between connections, when no other socket asks for stamps
    assert unstamped == 0, unstamped


def test_without_stamps_the_read_time_is_used(pair: tuple[socket.socket, socket.socket]) -> None:
    sender, reader = pair  # not enabled: no ancillary data comes with the bytes
    t_send = time.perf_counter()
    sender.sendall(b"y")
    time.sleep(0.05)
    data, t = rxstamp.recv(reader, 16)
    assert data == b"y"
    assert t - t_send >= 0.05


def test_end_of_stream_reads_empty(pair: tuple[socket.socket, socket.socket]) -> None:
    sender, reader = pair
    rxstamp.enable(reader)
    sender.shutdown(socket.SHUT_WR)
    before = time.perf_counter()
    data, t = rxstamp.recv(reader, 16)
    assert data == b"" and t >= before
