#!/usr/bin/env python3
"""What kshim's allocator holds, page by page, read from a running kshim (Linux, as root or as
the process that started it).

    .venv/bin/python tests/tools/heap_census.py PID

kshim allocates blocks under 1 MiB with mimalloc v3 (src/heap.rs). mimalloc keeps the blocks
of one size on pages of their own (64 KiB for blocks up to about 10 KiB, 512 KiB and 4 MiB
above), each owned by the thread that made it. A page is resident as far as its blocks were
ever written, and it goes back to the system only once every block on it is free: a page with
one live block keeps all its written free blocks resident. This tool reads the page table that
mimalloc keeps at the start of its arena (each page's block size, blocks in use, and owning
thread) through /proc/PID/mem, and which of the page's memory is resident through
/proc/PID/pagemap, and prints, per owning thread and per block size:

- resident: what the pages hold in memory;
- live: the bytes of the blocks in use;
- in empty pages: resident memory of pages with no block in use, which the owning thread has
  not yet handed back (it does when it parks, at most once a second);
- and the pages whose few live blocks keep the most free memory resident.

The page table's layout is mimalloc's own (libmimalloc-sys 0.1.49, mimalloc 3.x, release
build): the tool checks what it reads, and fails with a message when it finds no page table.
It reads only resident memory, so that it changes nothing in the process it reads.
"""

from __future__ import annotations

import collections
import struct
import sys
from pathlib import Path

# mimalloc maps its arenas from 2 TiB up (its address hints).
REGION = (2 << 40, 64 << 40)
PAGE = 4096
# The page table is in the arena's first slices: at most this much is read.
TABLE_BYTES = 2 << 20
# mi_page_t's first fields: xthread_id, free, used (u16), capacity (u16), reserved (u16),
# retire_expire (u8), free_is_zero (u8), local_free, xthread_free, block_size, page_start.
PAGE_T = struct.Struct("<QQHHHBBQQQQ")


class CensusError(RuntimeError):
    pass


def _mappings(pid: int) -> list[tuple[int, int, str]]:
    """(start, end, permissions) of each mapping of the process."""
    out = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        head = line.split()
        lo, hi = (int(x, 16) for x in head[0].split("-"))
        out.append((lo, hi, head[1]))
    return out


def _threads(pid: int, maps: list[tuple[int, int, str]]) -> dict[tuple[int, int], str]:
    """The stack mapping of each thread -> "TID name". A thread's pthread_t, which mimalloc
    records as a page's owner, lies in its stack mapping for every thread but the main one."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        fields = (task / "syscall").read_text().split()
        if len(fields) < 3:
            continue
        sp = int(fields[-2], 16)
        for lo, hi, _ in maps:
            if lo <= sp < hi:
                out[(lo, hi)] = f"{task.name} {name}"
    return out


def census(pid: int) -> str:
    mappings = _mappings(pid)
    maps = [(lo, hi) for lo, hi, perms in mappings if REGION[0] <= lo < REGION[1] and perms.startswith("rw")]
    if not maps:
        raise CensusError(f"no mimalloc arena in process {pid} (is it kshim, built with mimalloc?)")
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap, open(f"/proc/{pid}/mem", "rb") as mem:
        def resident(addr: int, pages: int) -> int:
            pagemap.seek((addr // PAGE) * 8)
            data = pagemap.read(8 * pages)
            return sum((struct.unpack_from("<Q", data, 8 * i)[0] >> 63) & 1 for i in range(len(data) // 8))

        arena = maps[0][0]
        table = bytearray(TABLE_BYTES)
        for off in range(0, TABLE_BYTES, PAGE):
            if resident(arena + off, 1):
                mem.seek(arena + off)
                table[off:off + PAGE] = mem.read(PAGE)
        pages = []
        for off in range(0, TABLE_BYTES - PAGE_T.size, 8):
            tid, _free, used, cap, reserved, _, _, _, _, bsize, start = PAGE_T.unpack_from(table, off)
            if (8 <= bsize <= 64 << 20 and arena <= start < arena + (64 << 30) and 0 < reserved
                    and cap <= reserved and used <= reserved and start % PAGE < 1024):
                span = reserved * bsize + start % PAGE
                pages.append({"bsize": bsize, "used": used, "reserved": reserved, "owner": tid & ~7,
                              "res": resident(start - start % PAGE, -(-span // PAGE)) * 4})
    if not pages:
        raise CensusError("no mimalloc page table found: a mimalloc other than 3.x, or a debug build")
    stacks = _threads(pid, mappings)

    def owner_name(owner: int) -> str:
        if owner == 0:
            return "abandoned (its thread ended)"
        for (lo, hi), name in stacks.items():
            if lo <= owner < hi:
                return name
        return f"{owner:#x} (the main thread: its pthread_t is not on a stack mapping)"

    kib = lambda p: p["used"] * p["bsize"] // 1024  # noqa: E731
    lines = [f"pid {pid}: {len(pages)} pages, resident {sum(p['res'] for p in pages)} KiB, "
             f"live {sum(kib(p) for p in pages)} KiB, in empty pages "
             f"{sum(p['res'] for p in pages if p['used'] == 0)} KiB"]
    lines.append("by owning thread: pages, resident KiB, live KiB, in empty pages KiB")
    by_owner: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for p in pages:
        row = by_owner[owner_name(p["owner"])]
        row[0] += 1
        row[1] += p["res"]
        row[2] += kib(p)
        row[3] += p["res"] if p["used"] == 0 else 0
    for name, row in sorted(by_owner.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"  {name}: {row[0]}, {row[1]}, {row[2]}, {row[3]}")
    lines.append("by block size (the 12 largest residents): pages, resident KiB, live blocks, live KiB")
    by_size: dict[int, list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for p in pages:
        row = by_size[p["bsize"]]
        row[0] += 1
        row[1] += p["res"]
        row[2] += p["used"]
        row[3] += kib(p)
    for size, row in sorted(by_size.items(), key=lambda kv: -kv[1][1])[:12]:
        lines.append(f"  {size} B: {row[0]}, {row[1]}, {row[2]}, {row[3]}")
    lines.append("pages whose live blocks keep the most free memory resident:")
    pinned = sorted((p for p in pages if p["used"]), key=lambda p: -(p["res"] - kib(p)))[:8]
    for p in pinned:
        lines.append(f"  blocks of {p['bsize']} B: {p['used']} of {p['reserved']} in use, {p['res']} KiB resident, "
                     f"{owner_name(p['owner'])}")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():
        print("usage: heap_census.py PID", file=sys.stderr)
        return 2
    try:
        print(census(int(sys.argv[1])))
    except (CensusError, OSError) as e:
        print(f"heap_census: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
