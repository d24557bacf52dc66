//! The heap kshim holds, told apart from the memory its allocator keeps.
//!
//! The `kshim` binary installs [`CountingAllocator`] as its global allocator:
//! the system allocator, counting the bytes allocated and not yet freed. The
//! count moves only with what kshim's code holds; a process's resident memory
//! also holds what the allocator keeps after a free (glibc keeps freed memory in
//! its arenas for reuse). After a burst (a rolling restart of the brokers makes
//! every client reconnect at once), the resident memory stays at the burst's
//! high-water mark although the heap went back down: [`release_free_memory`],
//! run periodically by `serve`, hands the free pages back to the system.
//!
//! Both figures are in `/metrics` (`kshim_heap_allocated_bytes`,
//! `kshim_resident_memory_bytes`), so that a growth of one without the other is
//! visible: a leak moves both; the allocator's retention only the second.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};

/// Counters per thread group, each on a cache line of its own: an allocation
/// adds to its thread's shard without contending with the other threads.
const SHARDS: usize = 16;

#[repr(align(64))]
struct Shard(AtomicI64);

static LIVE: [Shard; SHARDS] = [const { Shard(AtomicI64::new(0)) }; SHARDS];
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

thread_local! {
    // No destructor and a const initializer: reading it never allocates, also
    // while the thread is being torn down.
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn shard() -> &'static AtomicI64 {
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
    &LIVE[index].0
}

fn count(delta: i64) {
    shard().fetch_add(delta, Ordering::Relaxed);
}

/// The system allocator, counting the bytes it hands out and gets back.
pub struct CountingAllocator;

impl CountingAllocator {
    /// Call once the allocator is installed (`#[global_allocator]`), so that
    /// [`allocated_bytes`] reports the count.
    pub fn mark_installed(&self) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed on to `System` unchanged; the counting only
// reads the layout sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            count(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        count(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            count(new_size as i64 - layout.size() as i64);
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
    let live: i64 = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
    Some(u64::try_from(live).unwrap_or(0))
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

/// Hands the allocator's free pages back to the system (glibc's
/// `malloc_trim`); a no-op with other C libraries.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists, under its
    // locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_allocated_and_not_freed() {
        let a = CountingAllocator;
        let before: i64 = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        let layout = Layout::from_size_align(4096, 8).unwrap();
        // SAFETY: a non-zero layout, freed with the same layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            let q = a.realloc(p, layout, 8192);
            assert!(!q.is_null());
            let mid: i64 = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
            assert_eq!(mid - before, 8192);
            a.dealloc(q, Layout::from_size_align(8192, 8).unwrap());
        }
        let after: i64 = LIVE.iter().map(|s| s.0.load(Ordering::Relaxed)).sum();
        assert_eq!(after, before);
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().unwrap_or(0) > 0);
    }
}
