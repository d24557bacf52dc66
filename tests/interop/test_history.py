"""The soak's history checker (tests/interop/history.py) on small histories written here: one that
keeps every promise, and for each promise one that breaks it, which the checker must name with
the events that show it. The soak runs the checker on real histories (test_soak.py); these show
that it can fail. Record batches are encoded here as Kafka stores them, so that the parser is
checked too."""

from __future__ import annotations

import json
import struct

import history

FEATURE = "kshim.soak.version"


def varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = b""
    while True:
        if n < 0x80:
            return out + bytes([n])
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7


def batch(offset: int, pid: int, epoch: int, records: list[tuple[bytes, bytes]], t_ms: int,
          transactional: bool = True, marker: int | None = None) -> bytes:
    """A record batch (magic 2, uncompressed); with `marker`, a control batch (0 abort, 1 commit)."""
    if marker is not None:
        records = [(struct.pack(">hh", 0, marker), struct.pack(">hi", 0, 0))]
    body = b""
    for delta, (key, value) in enumerate(records):
        rec = b"\x00" + varint(0) + varint(delta) + varint(len(key)) + key + varint(len(value)) + value + varint(0)
        body += varint(len(rec)) + rec
    attrs = (0x10 if transactional else 0) | (0x20 if marker is not None else 0)
    tail = struct.pack(">hiqqqhii", attrs, len(records) - 1, t_ms, t_ms, pid, epoch, -1, len(records)) + body
    after_length = struct.pack(">ibI", 0, 2, 0) + tail
    return struct.pack(">qi", offset, len(after_length)) + after_length


def features(epoch: int, level: int, writer: str) -> tuple[bytes, bytes]:
    return b"soak/features", json.dumps({"version": 0, "epoch": epoch, "levels": {FEATURE: level},
                                         "writer": writer}).encode()


def good_log() -> bytes:
    """Two writers one after the other (epochs 0 and 1 of one producer id), and an aborted try."""
    return (batch(0, 7, 0, [features(1, 1, "kshim-1")], 1000) + batch(1, 7, 0, [], 1000, marker=1)
            + batch(2, 7, 0, [features(2, 5, "kshim-1")], 1500) + batch(3, 7, 1, [], 1600, marker=0)
            + batch(4, 7, 1, [features(2, 3, "kshim-2")], 2000) + batch(5, 7, 1, [], 2000, marker=1))


def good_history(state: list[dict]) -> dict:
    return {
        "feature": FEATURE, "cluster_id": "soak", "converge_s": 5.0, "state": state,
        "updates": [{"t": 1.9, "ms": 300, "inst": "kshim-2", "level": 3, "code": 0},
                    {"t": 1.4, "ms": 100, "inst": "kshim-1", "level": 5, "code": 7}],
        "rounds": [{"t": 1.2, "views": {"kshim-1": [1, 1], "kshim-2": [1, 1]}},
                   {"t": 2.4, "views": {"kshim-1": [2, 3], "kshim-2": [1, 1]}},
                   {"t": 2.6, "views": {"kshim-1": [2, 3], "kshim-2": [2, 3]}}],
        "faults": [{"kind": "kshim_cut_from_brokers", "at": 1.0, "healed": 2.5}],
    }


def test_a_history_that_keeps_every_promise():
    state = history.parse_batches(good_log())
    assert [b["offset"] for b in state] == [0, 1, 2, 3, 4, 5]
    assert [b.get("marker") for b in state if b["control"]] == ["commit", "abort", "commit"]
    verdicts = history.check(good_history(state))
    assert all(v["held"] for v in verdicts.values()), verdicts
    # The aborted record (level 5) is no committed state.
    assert [r["levels"][FEATURE] for r in history.committed_features(state, "soak")] == [1, 3]


def test_a_batch_cut_off_at_the_end_of_a_fetch_waits_for_the_next():
    data = good_log()
    assert len(history.parse_batches(data[:-10])) == 5


def broken(h: dict) -> dict[str, str]:
    return {k: v["detail"] for k, v in history.check(h).items() if not v["held"]}


def test_a_fenced_writer_that_appends_breaks_one_writer_at_a_time():
    log = good_log() + batch(6, 7, 0, [features(3, 4, "kshim-1")], 2100) + batch(7, 7, 0, [], 2100, marker=1)
    found = broken(good_history(history.parse_batches(log)))
    assert "one_writer_at_a_time" in found
    assert "epoch 0 after epoch 1" in found["one_writer_at_a_time"], found


def test_two_writers_in_one_epoch_break_one_writer_at_a_time():
    log = (good_log() + batch(6, 7, 1, [features(3, 4, "kshim-3")], 2100)
           + batch(7, 7, 1, [], 2100, marker=1))
    found = broken(good_history(history.parse_batches(log)))
    assert "several writers" in found["one_writer_at_a_time"], found


def test_an_epoch_served_lower_than_before_is_named():
    h = good_history(history.parse_batches(good_log()))
    h["rounds"].append({"t": 2.8, "views": {"kshim-1": [1, 1], "kshim-2": [2, 3]}})
    found = broken(h)
    assert "kshim-1 served epoch 2 at 2.40 and then epoch 1 at 2.80" in found["served_epochs_never_go_back"]


def test_a_served_state_never_committed_is_named():
    h = good_history(history.parse_batches(good_log()))
    h["rounds"].append({"t": 2.8, "views": {"kshim-1": [2, 5], "kshim-2": [2, 3]}})
    assert "level 5" in broken(h)["served_state_was_committed"]


def test_a_success_that_is_not_in_the_state_is_named():
    h = good_history(history.parse_batches(good_log()))
    h["updates"].append({"t": 2.2, "ms": 50, "inst": "kshim-1", "level": 8, "code": 0})
    assert "kshim.soak.version=8 at kshim-1" in broken(h)["acknowledged_updates_in_state"]


def test_instances_that_never_agree_after_a_heal_are_named():
    h = good_history(history.parse_batches(good_log()))
    h["rounds"] = h["rounds"][:2]
    assert "kshim_cut_from_brokers healed at 2.5: never" in broken(h)["converged_after_heals"]
