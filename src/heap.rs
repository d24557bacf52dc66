//! The heap kshim holds, told apart from the memory its allocator keeps.
//!
//! The `kshim` binary installs [`CountingAllocator`] as its global allocator:
//! mimalloc, counting the bytes allocated and not yet freed. The count moves
//! only with what kshim's code holds; a process's resident memory also holds
//! what the allocator keeps after a free. Both figures are in `/metrics`
//! (`kshim_heap_allocated_bytes`, `kshim_resident_memory_bytes`), so that a
//! growth of one without the other is visible: a leak moves both; the
//! allocator's retention only the second.
//!
//! Why mimalloc and not the C library's malloc: a burst of reconnections (a
//! rolling restart of the brokers moves every client at once) allocates
//! connection buffers of every size next to a few objects that outlive the
//! burst. glibc's malloc places them side by side in its arenas, so once the
//! buffers are freed, every page that still holds a survivor stays resident,
//! and `malloc_trim` cannot hand it back. In a 30-minute soak, an idle
//! instance's anonymous memory went from 2.4 to 7.9 MiB in steps at such
//! faults while its heap stayed at 1.4 MiB. mimalloc keeps the objects of one
//! size class on pages of their own, so the buffers of a burst leave whole
//! pages behind; each runtime thread hands those back when it goes idle
//! ([`release_free_memory_when_idle`]). Blocks of a MiB or more still come
//! from the C library's malloc (see [`LARGE`]). docs/operations.md gives the
//! soak's figures with both allocators.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mimalloc::MiMalloc as Inner;

mod kept;

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

/// mimalloc's `mi_option_arena_eager_commit` (its position in `mi_option_e`,
/// mimalloc.h; the Rust bindings do not name it).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Blocks of this size or more (request frames and fetch responses of a MiB
/// or more) come from the C library's malloc, which maps each one for itself
/// (the threshold is fixed at this size, see [`configure`]): the pages are
/// resident only once written, are kept for the next frame of about their size
/// or go back to the system (`kept`, bounded and released when unused for a
/// second), and a growing block is moved by remapping (`mremap`), not by copying into
/// a second block while the first is still resident. A partial 90 MiB frame
/// read into a growing buffer peaked at twice its size through mimalloc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const LARGE: usize = 1 << 20;
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
const LARGE: usize = usize::MAX;

static CONFIGURED: AtomicBool = AtomicBool::new(false);

/// Run before the first allocation.
///
/// mimalloc commits the memory of an arena at once on Linux by default, and
/// then purges the free pages of such an arena with `MADV_FREE`, which leaves
/// them counted in the resident memory until the machine runs short (an idle
/// instance showed 16 MiB instead of 3). Committed on demand, purged pages are
/// handed back at once (`MADV_DONTNEED`).
///
/// glibc raises its mmap threshold after each large free, up to 32 MiB, after
/// which large blocks would come from its arenas; fixed, every [`LARGE`] block
/// is mapped for itself.
#[inline]
fn configure() {
    if !CONFIGURED.load(Ordering::Relaxed) {
        CONFIGURED.store(true, Ordering::Relaxed);
        // SAFETY: setting an option has no preconditions; it does not allocate.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) };
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: mallopt has no preconditions.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, LARGE as libc::c_int);
        }
    }
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

/// mimalloc for blocks under [`LARGE`], the C library's malloc for larger
/// ones, counting the bytes handed out and given back.
pub struct CountingAllocator;

impl CountingAllocator {
    /// Call once the allocator is installed (`#[global_allocator]`), so that
    /// [`allocated_bytes`] reports the count.
    pub fn mark_installed(&self) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

/// # Safety
/// As [`GlobalAlloc::alloc`].
#[inline]
unsafe fn alloc_by_size(layout: Layout) -> *mut u8 {
    if layout.size() >= LARGE {
        if kept::keepable(layout.align()) {
            kept::alloc(layout.size())
        } else {
            System.alloc(layout)
        }
    } else {
        Inner.alloc(layout)
    }
}

/// # Safety
/// As [`GlobalAlloc::dealloc`]: `layout` is the one the block was allocated
/// with, so the size picks the allocator that did.
#[inline]
unsafe fn dealloc_by_size(ptr: *mut u8, layout: Layout) {
    if layout.size() >= LARGE {
        if kept::keepable(layout.align()) {
            kept::dealloc(ptr, layout.size());
        } else {
            System.dealloc(ptr, layout);
        }
    } else {
        Inner.dealloc(ptr, layout);
    }
}

// SAFETY: every block is allocated, resized and freed by one allocator,
// chosen by its size, which the caller passes again with every call for the
// block (`Layout`); a resize across LARGE moves the block from one to the
// other (allocate, copy, free). The counting only reads the sizes.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        configure();
        let p = alloc_by_size(layout);
        if !p.is_null() {
            count_allocation(layout.size() as i64);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        configure();
        let p = if layout.size() >= LARGE {
            if kept::keepable(layout.align()) {
                kept::alloc_zeroed(layout.size())
            } else {
                System.alloc_zeroed(layout)
            }
        } else {
            Inner.alloc_zeroed(layout)
        };
        if !p.is_null() {
            count_allocation(layout.size() as i64);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        dealloc_by_size(ptr, layout);
        count_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = match (layout.size() >= LARGE, new_size >= LARGE) {
            (true, true) if kept::keepable(layout.align()) => {
                kept::realloc(ptr, layout.size(), new_size)
            }
            (true, true) => System.realloc(ptr, layout, new_size),
            (false, false) => Inner.realloc(ptr, layout, new_size),
            _ => {
                // SAFETY: the caller guarantees that new_size, rounded up to
                // the alignment, does not overflow.
                let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
                let q = alloc_by_size(new_layout);
                if !q.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, q, layout.size().min(new_size));
                    dealloc_by_size(ptr, layout);
                }
                q
            }
        };
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

/// Bytes of large blocks kept for the next frames (see `kept`), which count in
/// the resident memory and not in [`allocated_bytes`].
pub fn kept_bytes() -> u64 {
    kept::kept().1 as u64
}

/// Hands back what the allocator keeps once it is no longer used, for as
/// long as the runtime runs, so that an instance that goes quiet holds none
/// of it: the large blocks kept for the next frames, once none was used for
/// a second; and the free pages of runtime threads that went to sleep before
/// handing them back ([`release_free_memory_when_idle`]), by waking them.
///
/// A thread's free pages can only be handed back by that thread, when it
/// parks. The last thread to go idle after a burst may have handed its pages
/// back a moment before the burst ended, and blocks it allocated may be freed
/// by other threads after its last park; then it sleeps, and a worker that
/// sleeps on the runtime's condition variable wakes only for new work. So,
/// once a second, while a thread owes a release or anything was allocated
/// since the last second, this task spawns two empty tasks on its own worker
/// (the second pushes the first from the worker's LIFO slot to its queue,
/// which wakes a parked worker to take it) and calls `wake_others` for the
/// threads of other runtimes; each woken thread parks again and hands its
/// pages back. An instance that stays idle is left asleep a second or two
/// later. A soak's idle instance kept 1.9 MiB of such pages 12 s after its
/// clients left, and gave them back minutes later.
pub async fn release_kept_memory(wake_others: impl Fn()) {
    let mut allocated = allocations();
    loop {
        tokio::time::sleep(kept::KEEP_IDLE).await;
        kept::release_if_idle();
        if OWING.load(Ordering::Relaxed) > 0 || allocations() != allocated {
            tokio::spawn(async {});
            tokio::spawn(async {});
            wake_others();
            // After the wake-ups' own allocations: a quiet second next time
            // means nothing else allocated.
            allocated = allocations();
        }
    }
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

/// How often at most a runtime thread hands its free memory back. A release
/// with nothing to hand back costs about half a microsecond; one after a
/// burst, a few hundred (what it frees and purges), at most once a second per
/// thread under any load.
const RELEASE_EVERY: Duration = Duration::from_secs(1);

/// Runtime threads that parked with free memory possibly not handed back
/// (their last release was under [`RELEASE_EVERY`] before): while there are
/// any, [`release_kept_memory`] wakes the parked threads.
static OWING: AtomicUsize = AtomicUsize::new(0);

/// A runtime thread's last release, and whether it owes one (counted in
/// [`OWING`] until it releases or ends).
struct Release {
    last: Cell<Option<Instant>>,
    owing: Cell<bool>,
}

thread_local! {
    static RELEASE: Release = const {
        Release { last: Cell::new(None), owing: Cell::new(false) }
    };
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.owing.get() {
            OWING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Called by each runtime thread as it goes idle (tokio's `on_thread_park`):
/// hands the free memory of this thread's heap back to the system, at most
/// once per [`RELEASE_EVERY`]; a park sooner than that leaves the thread
/// owing a release, which its next park pays once it is due (see
/// [`release_kept_memory`] for the threads that sleep). mimalloc purges a
/// thread's free pages only while that thread allocates and frees, so
/// without this an instance whose clients have left keeps the pages its last
/// burst emptied.
pub fn release_free_memory_when_idle() {
    kept::release_if_idle();
    let now = Instant::now();
    let due = RELEASE
        .try_with(|r| {
            let due = r
                .last
                .get()
                .is_none_or(|t| now.duration_since(t) >= RELEASE_EVERY);
            if due {
                r.last.set(Some(now));
                if r.owing.replace(false) {
                    OWING.fetch_sub(1, Ordering::Relaxed);
                }
            } else if !r.owing.replace(true) {
                OWING.fetch_add(1, Ordering::Relaxed);
            }
            due
        })
        .unwrap_or(false);
    if due {
        // SAFETY: mi_collect only walks this thread's heap and the
        // allocator's own structures.
        unsafe { libmimalloc_sys::mi_collect(true) };
    }
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
    fn a_block_keeps_its_bytes_when_it_grows_past_large_and_shrinks_back() {
        let _one = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
        let a = CountingAllocator;
        let before = live();
        let small = Layout::from_size_align(1000, 16).unwrap();
        let big = LARGE.min(4 << 20) * 2;
        // SAFETY: non-zero layouts; each block is freed with its current layout.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let q = a.realloc(p, small, big);
            assert!(!q.is_null());
            *q.add(big - 1) = 7;
            let r = a.realloc(q, Layout::from_size_align(big, 16).unwrap(), 500);
            assert!(!r.is_null());
            assert!((0..500).all(|i| *r.add(i) == (i % 251) as u8));
            let mid = live();
            assert_eq!(mid - before, 500);
            a.dealloc(r, Layout::from_size_align(500, 16).unwrap());
        }
        let after = live();
        assert_eq!(after, before);
    }

    #[test]
    fn a_large_block_freed_is_kept_for_the_next_of_its_size_and_released_when_unused() {
        let _one = COUNTERS.lock().unwrap_or_else(|e| e.into_inner());
        if LARGE == usize::MAX {
            return; // no large-block path on this platform
        }
        let a = CountingAllocator;
        let layout = Layout::from_size_align(LARGE + 1000, 8).unwrap();
        let reused = kept::reused();
        // SAFETY: a non-zero layout; each block is freed with its layout.
        unsafe {
            let p = a.alloc(layout);
            assert!(!p.is_null());
            *p.add(LARGE) = 1;
            a.dealloc(p, layout);
            // A frame of about the same size gets the same block back.
            let near = Layout::from_size_align(LARGE + 2000, 8).unwrap();
            let q = a.alloc(near);
            assert_eq!(q, p);
            assert_eq!(kept::reused(), reused + 1);
            a.dealloc(q, near);
        }
        assert!(kept::kept().0 >= 1);
        kept::release_all();
        assert_eq!(kept::kept(), (0, 0));
    }

    #[test]
    fn a_thread_that_parks_before_its_release_is_due_owes_one_until_it_releases() {
        std::thread::spawn(|| {
            let owing = || RELEASE.with(|r| r.owing.get());
            release_free_memory_when_idle();
            assert!(!owing(), "the first park releases");
            release_free_memory_when_idle();
            assert!(
                owing(),
                "a park within RELEASE_EVERY of the last release owes one"
            );
            RELEASE.with(|r| r.last.set(Instant::now().checked_sub(RELEASE_EVERY)));
            release_free_memory_when_idle();
            assert!(!owing(), "the next park once it is due pays it");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn resident_memory_is_read() {
        assert!(resident_bytes().unwrap_or(0) > 0);
    }
}
