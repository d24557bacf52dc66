//! The heap kshim holds, told apart from the memory its allocator keeps.
//!
//! The `kshim` binary installs [`CountingAllocator`] as its global allocator:
//! jemalloc, counting the bytes allocated and not yet freed. The count moves
//! only with what kshim's code holds (it is what the memory ceiling,
//! `server::ceiling`, counts); a process's resident memory also holds what the
//! allocator keeps after a free. Both figures are in `/metrics`
//! (`kshim_heap_allocated_bytes`, `kshim_resident_memory_bytes`), with
//! jemalloc's own (`kshim_allocator_allocated_bytes`,
//! `kshim_allocator_resident_bytes`), so that a growth of one without the
//! other is visible: a leak moves both; the allocator's retention only the
//! second.
//!
//! Why jemalloc, configured by the binary's `malloc_conf` (src/main.rs): its
//! background thread hands freed pages back after a second
//! (`dirty_decay_ms:1000`, `muzzy_decay_ms:0`: purged, not kept as lazily
//! freed pages that still count as resident), whether or not any runtime
//! thread wakes, and a large block (a 100 MiB frame) is an extent of its own
//! that the next frame of about its size reuses. The stack it replaced
//! (mimalloc, with each runtime thread collecting as it parked and tasks
//! spawned to wake the sleeping ones; the C library's malloc for blocks of a
//! MiB or more, with a cache of kept blocks) was measured against it in the
//! same runs (docs/performance.md, "The allocator"): the same CPU per GB and
//! memory per idle connection; after bursts of reconnections 0.5 MiB more
//! kept for a few seconds; 100 MiB frames at a third of the CPU and a tenth
//! of the page faults. The simpler stack won, and eleven `unsafe` blocks went
//! with the other.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use tikv_jemallocator::Jemalloc as Inner;

/// Counters per thread group, each on a cache line of its own: an allocation
/// adds to its thread's shard without contending with the other threads.
const SHARDS: usize = 16;

/// A thread group's bytes held and its number of allocations (alloc and
/// realloc calls) since start; the two share a cache line.
#[repr(align(64))]
struct Shard {
    live: AtomicI64,
    allocations: AtomicU64,
}

static LIVE: [Shard; SHARDS] = [const {
    Shard {
        live: AtomicI64::new(0),
        allocations: AtomicU64::new(0),
    }
}; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    // No destructor and a const initializer: reading it never allocates, also
    // while the thread is being torn down.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static Shard {
    let index = SHARD
        .try_with(|s| {
            let mut i = s.get();
            if i == usize::MAX {
                i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
                s.set(i);
            }
            i
        })
        .unwrap_or(0);
    &LIVE[index]
}

/// Counts an allocation (alloc or realloc) that changed the bytes held by `delta`.
fn count_allocation(delta: i64) {
    let shard = shard();
    shard.live.fetch_add(delta, Ordering::Relaxed);
    shard.allocations.fetch_add(1, Ordering::Relaxed);
}

/// Counts a free.
fn count_free(size: usize) {
    shard().live.fetch_sub(size as i64, Ordering::Relaxed);
}

/// jemalloc, counting the bytes handed out and given back.
pub struct CountingAllocator;

impl CountingAllocator {
    /// Call once the allocator is installed (`#[global_allocator]`), so that
    /// [`allocated_bytes`] reports the count.
    pub fn mark_installed(&self) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to jemalloc as it came; the counting only
// reads the sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = Inner.alloc(layout);
        if !p.is_null() {
            count_allocation(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = Inner.alloc_zeroed(layout);
        if !p.is_null() {
            count_allocation(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        Inner.dealloc(ptr, layout);
        count_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = Inner.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count_allocation(new_size as i64 - layout.size() as i64);
        }
        p
    }
}

/// Bytes allocated through the global allocator and not yet freed; `None`
/// when the counting allocator is not the global one (the library's tests).
pub fn allocated_bytes() -> Option<u64> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    let live: i64 = LIVE.iter().map(|s| s.live.load(Ordering::Relaxed)).sum();
    Some(u64::try_from(live).unwrap_or(0))
}

/// Allocations (alloc and realloc calls) since start, or `None` when the
/// counting allocator is not the global allocator. What a request costs in
/// allocations is the difference over many requests (the Metadata benchmark
/// reads it from `/metrics`).
pub fn allocations() -> Option<u64> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    Some(
        LIVE.iter()
            .map(|s| s.allocations.load(Ordering::Relaxed))
            .sum(),
    )
}

/// jemalloc's own figures, `(stats.allocated, stats.resident)`, refreshed by
/// advancing its epoch; `None` when the counting allocator is not the global
/// one or jemalloc was built without statistics.
pub fn allocator_stats() -> Option<(u64, u64)> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()?;
    let resident = stats::resident::read().ok()?;
    Some((allocated as u64, resident as u64))
}

/// The process's resident memory, from `/proc/self/statm`; `None` where that
/// file does not exist.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests below read the global counters: one at a time.
    static COUNTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn live() -> i64 {
        LIVE.iter().map(|s| s.live.load(Ordering::Relaxed)).sum()
    }

    fn calls() -> u64 {
        LIVE.iter()
            .map(|s| s.allocations.load(Ordering::Relaxed))
            .sum()
    }

    #[test]
    fn counts_what_is_allocated_and_not_freed() {
        let _one = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
        let a = CountingAllocator;
        let before = live();
        let calls_before = calls();
        let layout = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            let q = a.realloc(p, layout, 8192);
            assert!(!q.is_null());
            let mid = live();
            assert_eq!(mid - before, 8192);
            a.dealloc(q, Layout::from_size_align(8192, 8).unwrap());
        }
        let after = live();
        assert_eq!(after, before);
        // The alloc and the realloc; a free is not an allocation.
        assert_eq!(calls() - calls_before, 2);
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().unwrap_or(0) > 0);
    }
}
