"""The network lab: links between the processes of a test that can be given a round-trip time,
a segment size and a bandwidth, and cut or healed on command, one direction or both. Used by
the interop tests, the soak and the benchmarks alike (docs/development.md, "The network lab").

Two mechanisms, because the kernel here has neither netem nor a qdisc that delays:

- `Lab`: one Toxiproxy server (build/bin/toxiproxy-server, github.com/Shopify/toxiproxy/v2
  v2.5.0, built by scripts/install-deps.sh) per lab, and a `Link` per pair of processes: a
  proxy on loopback that the dialling side connects to instead of its peer. On a link:
    - `shape(rtt_ms=, bandwidth_kbps=, segment_bytes=)`: half the round trip is added in each
      direction, to every chunk after it arrives (a pipe of that length: nothing waits for the
      chunk ahead of it). Toxiproxy delays by whole milliseconds: the round trip is rounded to
      one, and an odd one puts its extra millisecond in the forward direction (1 ms is 1 ms
      forward and none back; `one_way_ms(rtt_ms)` gives the pair). The bandwidth is per
      direction; the segment size cuts every write into pieces of about that many bytes
      (Toxiproxy's slicer), for a path that must see them;
    - `cut(direction)`: nothing passes, nothing is reset, nothing is lost: a chunk stays in the
      link until `heal()`, as a segment on a cut path stays in its sender's socket and is
      retransmitted once the path is back. New connections are accepted by the link and then
      hear nothing (the peer of a real partition hears no SYN-ACK; a Kafka client treats both as
      a timeout). `direction` is "forward" (from the dialling side to its peer), "back", or
      "both": a one-way cut is a link that still carries the other direction;
    - `reset()`: every connection on the link is reset at its next byte, and every new one too,
      until `heal()`;
  Each change is recorded with its time in `Lab.events`, for the plots and the history checker.

- `Mtu`: a network namespace of its own whose loopback has a 1,500-byte MTU, so that every TCP
  segment between the processes inside it carries at most 1,448 bytes, as on Ethernet (without
  it loopback carries 64 KiB segments). `Mtu.command(argv)` runs a command inside;
  `python tests/interop/netlab.py --mtu 1500 -- CMD ...` runs CMD (a whole benchmark, with its
  broker, forwarders and clients) inside one, and removes the namespace after. Needs root.

Everything listens on 127.0.0.1 (in the host's namespace or the lab's own): nothing leaves the
machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env as ke  # noqa: E402

TOXIPROXY = ke.REPO_ROOT / "build" / "bin" / "toxiproxy-server"
TOXIPROXY_VERSION = "2.5.0"
# A cut is a delay longer than any test: no chunk passes until the cut is healed, and then
# every held chunk passes at once, in order (Toxiproxy hands a removed toxic's chunks on).
CUT_MS = 24 * 3600 * 1000
DIRECTIONS = {"forward": ("upstream",), "back": ("downstream",), "both": ("upstream", "downstream")}


def one_way_ms(rtt_ms: float) -> tuple[int, int]:
    """(forward, back) whole milliseconds that make up a round trip of `rtt_ms`, as `shape`
    sets them: half each way, the odd millisecond forward."""
    total = max(0, int(math.floor(rtt_ms + 0.5)))
    return total - total // 2, total // 2


def require_toxiproxy() -> Path:
    if not os.access(TOXIPROXY, os.X_OK):
        raise ke.EnvError(f"{TOXIPROXY} is missing: Toxiproxy {TOXIPROXY_VERSION} is built by "
                          "scripts/install-deps.sh (go build of github.com/Shopify/toxiproxy/v2/cmd/server)")
    return TOXIPROXY


class Lab:
    """One Toxiproxy server and its links. A context manager; `close()` stops the server by its
    PID, which closes every link's connections."""

    def __init__(self, workdir: Path | None = None):
        binary = require_toxiproxy()
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="kshim-netlab-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.api_port = ke.free_port()
        self.log_path = self.workdir / "toxiproxy.log"
        env = dict(os.environ, LOG_LEVEL="warn")
        self.proc = ke._spawn([str(binary), "-host", "127.0.0.1", "-port", str(self.api_port)],
                              cwd=self.workdir, log_path=self.log_path, env=env)
        self.links: dict[str, Link] = {}
        self.events: list[dict] = []
        self._lock = threading.Lock()
        if not ke.wait_until(lambda: self.proc.poll() is not None or ke.port_accepts("127.0.0.1", self.api_port),
                             20, 0.05) or self.proc.poll() is not None:
            out = ke.tail(self.log_path)
            self.close()
            raise ke.EnvError(f"toxiproxy-server did not start on 127.0.0.1:{self.api_port}\n{out}")

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        ke.stop_process(self.proc)

    def api(self, method: str, path: str, body: dict | None = None) -> object:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                text = resp.read()
        except urllib.error.HTTPError as e:
            raise ke.EnvError(f"toxiproxy {method} {path} {body}: {e.code} {e.read()[:300]!r}") from None
        return json.loads(text) if text else None

    def link(self, name: str, upstream: str, listen_port: int | None = None) -> "Link":
        """A link named `name` to `upstream` ("HOST:PORT"), listening on 127.0.0.1:`listen_port`
        (a free port when None)."""
        port = listen_port or ke.free_port()
        self.api("POST", "/proxies", {"name": name, "listen": f"127.0.0.1:{port}", "upstream": upstream,
                                      "enabled": True})
        link = Link(self, name, port, upstream)
        self.links[name] = link
        return link

    def record(self, link: str, what: str, **detail) -> None:
        with self._lock:
            self.events.append({"t": time.time(), "link": link, "what": what, **detail})


class Link:
    """A proxy of the lab between two processes; `address` is what the dialling side is given."""

    def __init__(self, lab: Lab, name: str, port: int, upstream: str):
        self.lab, self.name, self.port, self.upstream = lab, name, port, upstream
        self.toxics: set[str] = set()
        self.cut_direction: str | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _add(self, toxic: str, kind: str, stream: str, **attributes) -> None:
        self.lab.api("POST", f"/proxies/{self.name}/toxics",
                     {"name": toxic, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attributes})
        self.toxics.add(toxic)

    def _remove(self, prefix: str) -> None:
        for toxic in sorted(t for t in self.toxics if t.startswith(prefix)):
            self.lab.api("DELETE", f"/proxies/{self.name}/toxics/{toxic}")
            self.toxics.discard(toxic)

    def shape(self, rtt_ms: float = 0, bandwidth_kbps: int | None = None, segment_bytes: int | None = None) -> "Link":
        """Replaces the link's shape; a cut stays as it is."""
        self._remove("shape-")
        delay = dict(zip(DIRECTIONS["both"], one_way_ms(rtt_ms)))
        for stream in DIRECTIONS["both"]:
            if delay[stream]:
                self._add(f"shape-latency-{stream}", "latency", stream, latency=delay[stream], jitter=0)
            if bandwidth_kbps:
                self._add(f"shape-bandwidth-{stream}", "bandwidth", stream, rate=int(bandwidth_kbps))
            if segment_bytes:
                self._add(f"shape-slicer-{stream}", "slicer", stream, average_size=int(segment_bytes),
                          size_variation=0, delay=0)
        self.lab.record(self.name, "shape", rtt_ms=rtt_ms, bandwidth_kbps=bandwidth_kbps, segment_bytes=segment_bytes)
        return self

    def cut(self, direction: str = "both") -> None:
        """Nothing passes in `direction` until heal(); nothing is lost or reset."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {sorted(DIRECTIONS)}, not {direction!r}")
        self._remove("cut-")
        for stream in DIRECTIONS[direction]:
            self._add(f"cut-{stream}", "latency", stream, latency=CUT_MS, jitter=0)
        self.cut_direction = direction
        self.lab.record(self.name, "cut", direction=direction)

    def reset(self) -> None:
        """Every connection is reset at its next byte, and every new one, until heal()."""
        self._remove("cut-")
        self._add("cut-reset", "reset_peer", "upstream", timeout=0)
        self.cut_direction = "reset"
        self.lab.record(self.name, "reset")

    def heal(self) -> None:
        """Ends a cut or a reset; the shape stays. What a cut held passes now, in order."""
        self._remove("cut-")
        self.cut_direction = None
        self.lab.record(self.name, "heal")


class Mtu:
    """A network namespace whose loopback has `mtu` (root only). A context manager: the namespace
    is removed on exit."""

    def __init__(self, mtu: int = 1500):
        self.mtu = mtu
        self.name = f"kshim-lab-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
        if os.geteuid() != 0:
            raise ke.EnvError("a network namespace with its own MTU needs root (ip netns add)")
        for cmd in (["ip", "netns", "add", self.name],
                    ["ip", "-n", self.name, "link", "set", "lo", "mtu", str(mtu), "up"]):
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            if done.returncode != 0:
                self.close()
                raise ke.EnvError(f"{' '.join(cmd)}: {done.stderr.strip()}")

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def __enter__(self) -> "Mtu":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=20)


def main() -> int:
    ap = argparse.ArgumentParser(description="Runs a command inside a network namespace whose loopback "
                                             "has the given MTU, and removes the namespace after.")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    args = ap.parse_args()
    argv = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not argv:
        ap.error("no command given (netlab.py --mtu 1500 -- CMD ARGS...)")
    try:
        with Mtu(args.mtu) as ns:
            proc = subprocess.Popen(ns.command(argv))

            def forward(signum, _frame):
                proc.send_signal(signum)

            # The command stops what it started before the namespace goes: SIGTERM and SIGHUP
            # are passed on to it, and a Ctrl-C reaches it from the terminal (one process group),
            # so this process only waits (subprocess.run would SIGKILL it a moment after a Ctrl-C).
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, forward)
            signal.signal(signal.SIGHUP, forward)
            return proc.wait()
    except ke.EnvError as e:
        print(f"netlab: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
