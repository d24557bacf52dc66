"""The network lab itself (tests/interop/netlab.py): that a link's round-trip time, bandwidth and
segment size are what it was given, that a cut holds the bytes of its direction only and loses
none of them, that a reset resets, and that the MTU namespace carries 1,448-byte segments. The
peer is an echo server of this test: the lab is measured, not kshim."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

import kafka_env as ke
import netlab


def segments_received(conn: socket.socket) -> int:
    """tcpi_segs_in of Linux's struct tcp_info: the TCP segments this socket has received."""
    return struct.unpack_from("I", conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256), 140)[0]


class Echo:
    """Echoes what it reads; counts the bytes, the reads it got and the segments of its latest
    connection."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = 0
        self.reads: list[int] = []
        self.segments = 0
        self.echo = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while chunk := conn.recv(1 << 20):
                    self.segments = segments_received(conn)
                    self.received += len(chunk)
                    self.reads.append(len(chunk))
                    if self.echo:
                        conn.sendall(chunk)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def lab(tmp_path):
    with netlab.Lab(tmp_path) as lab:
        yield lab


@pytest.fixture
def echo():
    e = Echo()
    yield e
    e.close()


def connect(link: netlab.Link) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", link.port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def round_trip_ms(s: socket.socket, n: int = 5) -> float:
    best = float("inf")
    for _ in range(n):
        start = time.perf_counter()
        s.sendall(b"x")
        assert s.recv(16) == b"x"
        best = min(best, (time.perf_counter() - start) * 1000)
    return best


def test_round_trip_time_is_what_the_link_was_given(lab, echo):
    link = lab.link("rtt", f"127.0.0.1:{echo.port}")
    with connect(link) as s:
        bare = round_trip_ms(s)
        link.shape(rtt_ms=40)
        shaped = round_trip_ms(s)
    assert bare < 10, f"an unshaped link adds {bare:.1f} ms"
    assert 39 <= shaped < 80, f"a 40 ms link measured {shaped:.1f} ms"


def test_an_odd_round_trip_puts_its_extra_millisecond_forward(lab, echo):
    # Toxiproxy delays by whole milliseconds: 1 ms cannot be halved, and must not become 0.
    assert [netlab.one_way_ms(ms) for ms in (0, 1, 3, 20)] == [(0, 0), (1, 0), (2, 1), (10, 10)]
    link = lab.link("odd", f"127.0.0.1:{echo.port}").shape(rtt_ms=1)
    with connect(link) as s:
        shaped = round_trip_ms(s)
    assert 1 <= shaped < 10, f"a 1 ms link measured {shaped:.2f} ms"


def test_a_cut_holds_its_direction_and_loses_nothing(lab, echo):
    link = lab.link("cut", f"127.0.0.1:{echo.port}")
    with connect(link) as s:
        round_trip_ms(s, 1)
        link.cut("forward")
        s.sendall(b"held")
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):
            s.recv(16)
        assert echo.received == 1, "a forward cut let bytes reach the peer"
        link.heal()
        s.settimeout(5)
        assert ke._recv_exact(s, 4) == b"held", "what the cut held did not pass after the heal"

        link.cut("back")  # one way: the peer hears the client, the client hears nothing
        s.sendall(b"one-way")
        assert ke.wait_until(lambda: echo.received == 1 + 4 + 7, 5, 0.02), "a back cut stopped the forward direction"
        s.settimeout(0.5)
        with pytest.raises(socket.timeout):
            s.recv(16)
        link.heal()
        s.settimeout(5)
        assert ke._recv_exact(s, 7) == b"one-way"
    events = [e["what"] for e in lab.events]
    assert events == ["cut", "heal", "cut", "heal"], events


def test_a_reset_resets_until_healed(lab, echo):
    link = lab.link("reset", f"127.0.0.1:{echo.port}")
    with connect(link) as s:
        round_trip_ms(s, 1)
        link.reset()
        s.settimeout(5)
        try:
            s.sendall(b"x")
            got = s.recv(16)
        except (ConnectionResetError, BrokenPipeError):
            got = b""
        assert got == b"", f"a reset link answered {got!r}"
    link.heal()
    with connect(link) as s:
        assert round_trip_ms(s, 1) < 1000


def test_segments_and_bandwidth(lab, echo):
    echo.echo = False
    link = lab.link("shape", f"127.0.0.1:{echo.port}").shape(segment_bytes=1448)
    with connect(link) as s:
        s.sendall(bytes(64 << 10))
        assert ke.wait_until(lambda: echo.received == 64 << 10, 5, 0.02)
    # Unsliced, 64 KiB arrives in about 5 segments (loopback's MSS is 64 KiB); in 1,448-byte
    # writes, in dozens. The kernel's count, not the reads: one read may take several segments.
    assert echo.segments >= 10, f"64 KiB arrived in {echo.segments} segments ({len(echo.reads)} reads)"

    link.shape(bandwidth_kbps=1024)  # KB/s
    with connect(link) as s:
        start = time.monotonic()
        s.sendall(bytes(256 << 10))
        assert ke.wait_until(lambda: echo.received == (64 << 10) + (256 << 10), 10, 0.02)
        took = time.monotonic() - start
    assert took >= 0.2, f"256 KiB at 1,024 KB/s took {took:.2f} s"


def test_mtu_namespace_carries_1448_byte_segments():
    probe = ("import socket; s = socket.create_server(('127.0.0.1', 0)); "
             "c = socket.create_connection(s.getsockname()); "
             "print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG))")
    with netlab.Mtu(1500) as ns:
        done = subprocess.run(ns.command([sys.executable, "-c", probe]), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 1448, f"MSS inside the namespace: {done.stdout}"
    gone = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert ns.name not in gone, "the namespace outlived its context"

