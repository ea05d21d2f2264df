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
    ages = []
    for _ in range(5):
        t_send = time.perf_counter()
        sender.sendall(b"x" * 100)
        time.sleep(0.1)  # the reader is busy elsewhere for 100 ms
        data, t = rxstamp.recv(reader, 4096)
        assert data == b"x" * 100
        ages.append(t - t_send)
    # Dated inside the send over loopback (a read's own time would be >= 100 ms after it), and
    # never before it: the clock conversion errs late only (see the module doc).
    assert all(age >= 0 for age in ages), ages
    assert sorted(ages)[2] < 0.02, ages


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
