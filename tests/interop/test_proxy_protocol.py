"""kshim behind a TCP load balancer that speaks the PROXY protocol (versions 1 and 2).

The balancer is a relay in this process: it accepts a client on its own port, connects to
kshim from 127.0.0.2 (the only address in `proxy_protocol_trusted`), sends the PROXY header
naming the address the test chose for that client, then copies bytes both ways. kshim runs
standalone and advertises the relay's address, so real clients (kcat, kafka-python) see only
the relay. Checked:
- real clients are served through the relay with either header version, and the census
  lists them under the address from the header, not the relay's;
- `max_connections_per_ip` (2) counts the header's address: three clients behind the one
  balancer each hold two connections, the census lists all three addresses, and a third
  connection "from" one of them is refused;
- a connection from an untrusted address (127.0.0.1, straight to kshim), one from the
  trusted address without a header, and one with a malformed header are closed before their
  first request, and counted under `kshim_connections_refused_total{reason="proxy_protocol"}`.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading

import kafka_env as ke

TOKEN = "proxy-protocol-token"
BALANCER = "127.0.0.2"


def v1_header(client: tuple[str, int], kshim_port: int) -> bytes:
    return f"PROXY TCP4 {client[0]} 127.0.0.1 {client[1]} {kshim_port}\r\n".encode()


def v2_header(client: tuple[str, int], kshim_port: int) -> bytes:
    body = socket.inet_aton(client[0]) + socket.inet_aton("127.0.0.1") + struct.pack(">HH", client[1], kshim_port)
    # A TLV kshim must skip: PP2_TYPE_AUTHORITY (0x02) "kafka.example".
    body += b"\x02" + struct.pack(">H", 13) + b"kafka.example"
    return b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack(">H", len(body)) + body


class Relay(ke.TcpRelay):
    """A load balancer: each accepted client gets its own connection to kshim, from
    BALANCER, opened with `header(client address)` (None: no header)."""

    def __init__(self, target: tuple[str, int]):
        super().__init__(target, source=BALANCER)


def answered(bootstrap: str) -> bool:
    """Whether an ApiVersions request on a new connection gets an answer."""
    try:
        return ke.api_versions(bootstrap, timeout=5).error_code == 0
    except (OSError, ke.EnvError, struct.error):
        return False


def served_on(sock: socket.socket) -> bool:
    """Whether an ApiVersions request on this open connection gets an answer."""
    frame = ke.api_versions_request(3)
    try:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", ke._recv_exact(sock, 4))[0]
        ke._recv_exact(sock, size)
        return True
    except (OSError, ke.EnvError, struct.error):
        return False


def refusals(admin: ke.AdminApi, reason: str) -> float:
    status, text = admin.get("/metrics")
    assert status == 200, text
    for line in str(text).splitlines():
        if line.startswith(f'kshim_connections_refused_total{{reason="{reason}"}}'):
            return float(line.split()[-1])
    raise AssertionError(f"no refusal series for {reason}")


def test_clients_behind_a_proxy_protocol_balancer(kshim_factory):
    admin_port = ke.free_port()
    relay = Relay(("127.0.0.1", 0))
    try:
        proxy = kshim_factory(f"""
advertised_listener = "127.0.0.1:{relay.port}"
proxy_protocol = "any"
proxy_protocol_trusted = ["{BALANCER}/32"]
max_connections_per_ip = 2
[admin]
listen = "127.0.0.1:{admin_port}"
token = "{TOKEN}"
""")
        kshim_port = proxy.port
        relay.target = ("127.0.0.1", kshim_port)
        admin = ke.AdminApi(admin_port, TOKEN)
        through = f"127.0.0.1:{relay.port}"

        # Real clients through the balancer, one header version each.
        relay.header, relay.client = v1_header, ("192.0.2.10", 40001)
        kcat = subprocess.run(["kcat", "-L", "-b", through, "-m", "10"], capture_output=True, text=True, timeout=60)
        assert kcat.returncode == 0 and f"127.0.0.1:{relay.port}" in kcat.stdout, kcat.stdout + kcat.stderr
        relay.header, relay.client = v2_header, ("192.0.2.20", 40002)
        kp = subprocess.run([sys.executable, "-c", """
import json, sys
from kafka import KafkaAdminClient
a = KafkaAdminClient(bootstrap_servers=sys.argv[1], request_timeout_ms=15000)
print(json.dumps({"brokers": [b["port"] for b in a.describe_cluster()["brokers"]]}))
a.close()
""", through], capture_output=True, text=True, timeout=60)
        assert kp.returncode == 0, kp.stderr[-3000:]
        assert json.loads(kp.stdout.splitlines()[-1]) == {"brokers": [relay.port]}

        status, body = admin.get("/admin/clients")
        assert status == 200, body
        seen = {a for c in body["clients"] for a in c["addresses"]}
        assert {"192.0.2.10", "192.0.2.20"} <= seen and BALANCER not in seen, body["clients"]

        # max_connections_per_ip counts the address from the header: three clients behind the
        # one balancer each hold two connections, and a third from one of them is refused.
        held = []
        try:
            for address in ("198.51.100.7", "198.51.100.8", "198.51.100.9"):
                relay.header, relay.client = v2_header, (address, 50000)
                for _ in range(2):
                    held.append(socket.create_connection(("127.0.0.1", relay.port), timeout=5))
                    assert served_on(held[-1]), f"connection {len(held)} from {address} was refused"
            relay.client = ("198.51.100.7", 50001)
            assert not answered(through), "a third connection from 198.51.100.7 was served"
            status, body = admin.get("/admin/clients")
            seen = {a for c in body["clients"] for a in c["addresses"]}
            assert {"198.51.100.7", "198.51.100.8", "198.51.100.9"} <= seen, body["clients"]
        finally:
            for s in held:
                s.close()
        assert refusals(admin, "address_limit") >= 1

        # Untrusted, headerless and malformed connections are closed before their first request.
        before = refusals(admin, "proxy_protocol")
        assert not answered(f"127.0.0.1:{kshim_port}"), "a connection from an untrusted address was served"
        relay.header = None
        assert not answered(through), "a connection without a header was served"
        relay.header = lambda client, port: b"PROXY TCP4 not-an-address 127.0.0.1 1 2\r\n"
        assert not answered(through), "a connection with a malformed header was served"
        assert ke.wait_until(lambda: refusals(admin, "proxy_protocol") >= before + 3, 10), (
            f"refusals counted: {refusals(admin, 'proxy_protocol') - before} of 3")
        # Still serving the balancer's clients afterwards.
        relay.header, relay.client = v2_header, ("192.0.2.30", 40003)
        assert answered(through)
    finally:
        relay.close()
