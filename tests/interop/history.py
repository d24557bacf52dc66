"""The soak's history and its checker: what the kshim cluster promises, judged over a whole run
from what was recorded, and not from any instance's own account of itself.

The history (history.json in the soak's report directory) holds:
  - `state`: every batch of the state topic's partition as its leader stored it, read raw by a
    tail (`StateTail`) that follows the partition through the run from offset 0 with
    read_uncommitted: data and control batches, aborted ones too, with their producer id and
    epoch, so that compaction later cannot hide a record;
  - `updates`: every UpdateFeatures the soak sent, with the instance, the level, when it was sent
    and the answer;
  - `rounds`: every instance's served feature epoch and level, sampled four times a second;
  - `faults`: each fault with the moment it healed.

`check(history)` returns one verdict per promise, each with the smallest part of the history
that breaks it:
  - one_writer_at_a_time: along the state partition, a producer id's epoch never goes back (the
    transaction coordinator fenced every earlier holder of the writer role, and the partition
    leader refused its writes), every committed transaction's feature records name one writer,
    and committed feature records' epochs only go up;
  - served_epochs_never_go_back: no instance serves an epoch lower than one it served before;
  - served_state_was_committed: every (epoch, level) an instance served is a committed record's;
  - acknowledged_updates_in_state: every UpdateFeatures answered with success is in the state:
    its level was committed while it was in flight, or was the committed level already;
  - converged_after_heals: after each fault heals, every instance serves the same epoch and level
    within `converge_s`.

`python tests/interop/history.py REPORT_DIR` checks a stored history again and prints each verdict.
"""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kafka_env as ke  # noqa: E402

# The record batch attributes (KIP-98).
TRANSACTIONAL = 0x10
CONTROL = 0x20
COMMIT, ABORT = 1, 0
# A batch timestamp is kshim's clock and an update's times are the soak's: one machine, but a
# batch is stamped before its commit and an answer read after it.
CLOCK_SLACK_S = 1.0


# --------------------------------------------------------------------------------------------
# Reading the state partition


def _zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    raw, pos = ke._uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def parse_batches(data: bytes) -> list[dict]:
    """The whole record batches (magic 2, uncompressed, as kshim writes them) in `data`; a batch
    cut off at the end of a fetch is left for the next one."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data):
            break
        (magic,) = struct.unpack_from(">b", data, pos + 16)
        if magic != 2:
            raise ValueError(f"batch at offset {base}: magic {magic}")
        attrs, last_delta, first_ts, _max_ts, pid, epoch, _seq, count = struct.unpack_from(
            ">hiqqqhii", data, pos + 21)
        if attrs & 0x07:
            raise ValueError(f"batch at offset {base}: compressed ({attrs & 7}); the state topic is not")
        batch = {"offset": base, "last_offset": base + last_delta, "pid": pid, "epoch": epoch,
                 "transactional": bool(attrs & TRANSACTIONAL), "control": bool(attrs & CONTROL),
                 "t": first_ts / 1000, "records": []}
        rpos = pos + 61
        for _ in range(count):
            size, rpos = _zigzag(data, rpos)
            rend = rpos + size
            rpos += 1  # attributes
            _, rpos = _zigzag(data, rpos)  # timestamp delta
            delta, rpos = _zigzag(data, rpos)
            klen, rpos = _zigzag(data, rpos)
            key = data[rpos:rpos + klen] if klen >= 0 else None
            rpos += max(klen, 0)
            vlen, rpos = _zigzag(data, rpos)
            value = data[rpos:rpos + vlen] if vlen >= 0 else None
            rpos = rend
            if batch["control"]:
                batch["marker"] = "commit" if key and struct.unpack(">hh", key[:4])[1] == COMMIT else "abort"
            else:
                batch["records"].append({"offset": base + delta, "key": key.decode(errors="replace") if key else None,
                                         "value": value.decode(errors="replace") if value is not None else None})
        out.append(batch)
        pos = end
    return out


def fetch_v12_records(resp: bytes) -> tuple[int, int, bytes]:
    """(error code, high watermark, records) of the one partition of a Fetch v12 response
    (without its size)."""
    pos = ke._skip_tags(resp, 4)  # correlation id, header tags
    pos += 4 + 2 + 4  # throttle, error, session
    topics, pos = ke._uvarint(resp, pos)
    assert topics == 2, "one topic asked for"
    _, pos = ke._compact_str(resp, pos)
    parts, pos = ke._uvarint(resp, pos)
    assert parts == 2, "one partition asked for"
    _index, error, hw = struct.unpack_from(">ihq", resp, pos)
    pos += 4 + 2 + 8 + 8 + 8
    aborted, pos = ke._uvarint(resp, pos)
    for _ in range(max(aborted - 1, 0)):
        pos = ke._skip_tags(resp, pos + 16)
    pos += 4  # preferred read replica
    size, pos = ke._uvarint(resp, pos)
    return error, hw, resp[pos:pos + max(size - 1, 0)]


class StateTail:
    """Follows the state partition from offset 0 through the whole run, from whichever broker
    leads it, into `batches`. `bootstraps()` names the brokers to ask for the leader."""

    def __init__(self, bootstraps, topic: str = "__kshim_state", poll_s: float = 0.5):
        self.bootstraps, self.topic, self.poll_s = bootstraps, topic, poll_s
        self.batches: list[dict] = []
        self.next_offset = 0
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="state-tail")

    def start(self) -> "StateTail":
        self.thread.start()
        return self

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)

    def _leader(self) -> str | None:
        for bootstrap in self.bootstraps():
            try:
                brokers, _, leaders = ke.metadata_v12_topic(bootstrap, self.topic)
                host, port = brokers[leaders[0]]
                return f"{host}:{port}"
            except Exception:  # noqa: BLE001 - a broker down or the topic not made yet: the next
                continue
        return None

    def _run(self) -> None:
        sock, correlation = None, 0
        while not self.stop.wait(self.poll_s):
            try:
                if sock is None:
                    leader = self._leader()
                    if leader is None:
                        continue
                    sock = socket.create_connection(ke.split_hostport(leader), timeout=5)
                while not self.stop.is_set():
                    correlation += 1
                    sock.sendall(ke.fetch_v12(correlation, self.topic, 1 << 20, self.next_offset))
                    error, hw, records = fetch_v12_records(ke.read_frame(sock))
                    if error != 0:
                        raise ke.EnvError(f"Fetch error {error}")
                    got = parse_batches(records)
                    self.batches += [b for b in got if b["last_offset"] >= self.next_offset]
                    if got:
                        self.next_offset = got[-1]["last_offset"] + 1
                    if not got or self.next_offset >= hw:
                        break
            except (OSError, ke.EnvError, AssertionError, struct.error, ValueError):
                self.errors += 1
                if sock is not None:
                    sock.close()
                sock = None
        if sock is not None:
            sock.close()

    def catch_up(self, timeout: float = 30) -> bool:
        """Whether the tail reached the partition's end (its last read found nothing new) within
        `timeout`."""
        def reached():
            for bootstrap in self.bootstraps():
                try:
                    brokers, _, leaders = ke.metadata_v12_topic(bootstrap, self.topic)
                    frame = ke.fetch_v12(1, self.topic, 1, self.next_offset)[4:]
                    _, hw, _ = fetch_v12_records(ke.exchange("%s:%d" % brokers[leaders[0]], frame, 5))
                    return self.next_offset >= hw
                except Exception:  # noqa: BLE001
                    continue
            return False
        return ke.wait_until(reached, timeout, 0.5)


# --------------------------------------------------------------------------------------------
# The checker


def committed_features(state: list[dict], cluster_id: str) -> list[dict]:
    """The committed `<id>/features` records in log order, each with its batch's producer id,
    epoch and timestamp."""
    open_txn: dict[tuple[int, int], list[dict]] = {}
    out = []
    for b in state:
        key = (b["pid"], b["epoch"])
        if b["control"]:
            held = open_txn.pop(key, [])
            if b.get("marker") == "commit":
                out += held
            continue
        for r in b["records"]:
            if r["key"] != f"{cluster_id}/features" or r["value"] is None:
                continue
            doc = json.loads(r["value"])
            rec = {"offset": r["offset"], "pid": b["pid"], "producer_epoch": b["epoch"], "t": b["t"],
                   "epoch": doc.get("epoch"), "levels": doc.get("levels", {}), "writer": doc.get("writer")}
            if b["transactional"]:
                open_txn.setdefault(key, []).append(rec)
            else:
                out.append(rec)  # not the writer's: one_writer_at_a_time names it
    return sorted(out, key=lambda r: r["offset"])


def one_writer_at_a_time(state: list[dict], cluster_id: str) -> tuple[bool, str]:
    last: dict[int, dict] = {}
    for b in state:
        if not b["transactional"]:
            if any(r["key"] == f"{cluster_id}/features" for r in b["records"]):
                return False, f"a feature record outside a transaction: batch {brief(b)}"
            continue
        before = last.get(b["pid"])
        if before is not None and b["epoch"] < before["epoch"]:
            return False, (f"producer {b['pid']} wrote at epoch {b['epoch']} after epoch {before['epoch']}: "
                           f"{brief(before)} then {brief(b)}")
        last[b["pid"]] = b
    feats = committed_features(state, cluster_id)
    txns: dict[tuple[int, int], set] = {}
    for r in feats:
        txns.setdefault((r["pid"], r["producer_epoch"]), set()).add(r["writer"])
    several = {k: v for k, v in txns.items() if len(v) > 1}
    if several:
        return False, f"one producer epoch's committed records name several writers: {several}"
    for a, b in zip(feats, feats[1:]):
        if b["epoch"] is None or a["epoch"] is None or b["epoch"] <= a["epoch"]:
            return False, f"committed feature epochs do not go up: {a} then {b}"
    epochs = sorted({k[1] for k in txns})
    return True, (f"{len(state)} batches, {len(feats)} committed feature records from {len(txns)} writer epochs "
                  f"({epochs[0] if epochs else '-'}..{epochs[-1] if epochs else '-'}); no epoch went back")


def brief(b: dict) -> str:
    kind = b.get("marker", "control") if b["control"] else f"{len(b['records'])} records"
    return f"offset {b['offset']} pid {b['pid']} epoch {b['epoch']} ({kind})"


def served_epochs_never_go_back(rounds: list[dict]) -> tuple[bool, str]:
    last: dict[str, tuple[float, int]] = {}
    for r in rounds:
        for name, view in r["views"].items():
            if not view or view[0] is None:
                continue
            if name in last and view[0] < last[name][1]:
                t0, e0 = last[name]
                return False, f"{name} served epoch {e0} at {t0:.2f} and then epoch {view[0]} at {r['t']:.2f}"
            if name not in last or view[0] > last[name][1]:
                last[name] = (r["t"], view[0])
    return bool(last), f"{len(rounds)} sampling rounds; last epochs {({k: v[1] for k, v in sorted(last.items())})}"


def served_state_was_committed(rounds: list[dict], feats: list[dict], feature: str) -> tuple[bool, str]:
    committed = {r["epoch"]: r["levels"].get(feature) for r in feats}
    seen = 0
    for r in rounds:
        for name, view in r["views"].items():
            if not view or view[0] is None or view[0] < 0:
                continue
            seen += 1
            epoch, level = view
            if epoch not in committed:
                return False, f"{name} served epoch {epoch} (level {level}) at {r['t']:.2f}; no committed record has it"
            if committed[epoch] is not None and committed[epoch] != level:
                return False, (f"{name} served epoch {epoch} with level {level} at {r['t']:.2f}; "
                               f"the committed record of that epoch has level {committed[epoch]}")
    return seen > 0, f"{seen} served views, each a committed record's epoch and level ({len(committed)} committed)"


def acknowledged_updates_in_state(updates: list[dict], feats: list[dict], feature: str) -> tuple[bool, str]:
    ok = [u for u in updates if u["code"] == 0]
    for u in ok:
        sent, answered = u["t"], u["t"] + u["ms"] / 1000
        before = [r for r in feats if r["t"] < sent - CLOCK_SLACK_S]
        during = [r for r in feats if sent - CLOCK_SLACK_S <= r["t"] <= answered + CLOCK_SLACK_S]
        already = before[-1]["levels"].get(feature) if before else None
        if u["level"] != already and not any(r["levels"].get(feature) == u["level"] for r in during):
            return False, (f"UpdateFeatures {feature}={u['level']} at {u['inst']}, sent {sent:.2f}, answered success "
                           f"{answered:.2f}: committed level before it {already}, records while it was in flight "
                           f"{[(r['offset'], r['epoch'], r['levels'].get(feature)) for r in during]}")
    return bool(ok), f"{len(ok)} UpdateFeatures answered success, each in the state topic"


def converged_after_heals(rounds: list[dict], faults: list[dict], converge_s: float) -> tuple[bool, str, list]:
    """Also sets each fault's `converged_s`."""
    slow, delays = [], []
    for f in faults:
        if not f.get("healed"):
            continue
        first = next((r for r in rounds if r["t"] >= f["healed"] and all(r["views"].values())
                      and len({tuple(v) for v in r["views"].values()}) == 1), None)
        delay = None if first is None else first["t"] - f["healed"]
        f["converged_s"] = None if delay is None else round(delay, 2)
        if delay is None or delay > converge_s:
            last = [r for r in rounds if r["t"] >= f["healed"]][-1:]
            slow.append(f"{f['kind']} healed at {f['healed']:.1f}: {'never' if delay is None else f'{delay:.1f} s'}"
                        + (f" (views at the end: {last[0]['views']})" if delay is None and last else ""))
        else:
            delays.append(delay)
    if slow:
        return False, f"slower than {converge_s:g} s: " + "; ".join(slow), delays
    return True, (f"every instance served the same features and epoch within {max(delays, default=0):.2f} s of "
                  f"each fault healing (limit {converge_s:g} s)"), delays


def check(history: dict) -> dict[str, dict]:
    feature, cluster_id = history["feature"], history["cluster_id"]
    feats = committed_features(history["state"], cluster_id)
    verdicts = {
        "one_writer_at_a_time": one_writer_at_a_time(history["state"], cluster_id),
        "served_epochs_never_go_back": served_epochs_never_go_back(history["rounds"]),
        "served_state_was_committed": served_state_was_committed(history["rounds"], feats, feature),
        "acknowledged_updates_in_state": acknowledged_updates_in_state(history["updates"], feats, feature),
        "converged_after_heals": converged_after_heals(history["rounds"], history["faults"],
                                                       history["converge_s"])[:2],
    }
    if not history.get("state_complete", True):
        _, detail = verdicts["one_writer_at_a_time"]
        verdicts["one_writer_at_a_time"] = (False, "the state tail did not reach the partition's end; " + detail)
    return {k: {"held": bool(v[0]), "detail": v[1]} for k, v in verdicts.items()}


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: history.py REPORT_DIR (the soak's --out, holding history.json)", file=sys.stderr)
        return 2
    history = json.loads((Path(sys.argv[1]) / "history.json").read_text())
    verdicts = check(history)
    for name, v in verdicts.items():
        print(f"{'held  ' if v['held'] else 'BROKEN'} {name}: {v['detail']}")
    return 0 if all(v["held"] for v in verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
