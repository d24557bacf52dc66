//! Large blocks kept for their next use.
//!
//! A consumer's Fetch answers are a MiB or more each, one after another on the
//! same connection, and so are a producer's large Produce requests. Mapped
//! afresh for each frame, every 4 KiB page of a block was faulted in and zeroed
//! by the kernel on its first write and unmapped again at its free (a TLB
//! shootdown each time): in a profile of kshim forwarding 64 KiB records to a
//! consumer, a quarter of its CPU went to those faults. Blocks of the same size
//! class are now handed back to the next frame instead, their pages resident.
//!
//! What is kept is bounded ([`KEEP_BLOCKS`], [`KEEP_BYTES`]) and goes back to
//! the system once no block has been taken or returned for [`KEEP_IDLE`], so a
//! quiet instance holds none of it.
//!
//! Blocks come from the C library's malloc (which maps each one for itself,
//! see `super::LARGE`) rounded up to a multiple of [`CLASS`], so that a block
//! freed by one frame fits the next of about its size; pages past what a frame
//! writes are never touched, so the rounding costs no resident memory.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Sizes are rounded up to a multiple of this.
const CLASS: usize = 128 << 10;

/// At most this many blocks are kept,
const KEEP_BLOCKS: usize = 8;
/// holding at most this many bytes together.
const KEEP_BYTES: usize = 16 << 20;

/// Kept blocks go back to the system after this long without a use.
pub(super) const KEEP_IDLE: Duration = Duration::from_secs(1);

/// The alignment the C library's malloc gives every block; a layout asking
/// for more is served by `System` and never kept.
const MALLOC_ALIGN: usize = 16;

struct Kept {
    /// `(address, class size)` of the first `len` entries.
    blocks: [(usize, usize); KEEP_BLOCKS],
    len: usize,
    bytes: usize,
}

static KEPT: Mutex<Kept> = Mutex::new(Kept {
    blocks: [(0, 0); KEEP_BLOCKS],
    len: 0,
    bytes: 0,
});

/// Blocks kept now, read without the lock by the idle check.
static KEPT_COUNT: AtomicUsize = AtomicUsize::new(0);
/// When a block was last taken or kept, in milliseconds since [`epoch`].
static LAST_USE_MS: AtomicU64 = AtomicU64::new(0);
/// Blocks handed out that were kept (for the tests and the profile notes).
static REUSED: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn lock() -> std::sync::MutexGuard<'static, Kept> {
    KEPT.lock().unwrap_or_else(|e| e.into_inner())
}

/// The size a block of `size` bytes is allocated with.
fn class_of(size: usize) -> usize {
    size.div_ceil(CLASS).saturating_mul(CLASS)
}

/// Whether blocks of this alignment go through the kept blocks.
pub(super) fn keepable(align: usize) -> bool {
    align <= MALLOC_ALIGN
}

/// A kept block of `class` bytes, if there is one.
fn take(class: usize) -> Option<*mut u8> {
    if KEPT_COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut kept = lock();
    let i = kept.blocks[..kept.len]
        .iter()
        .position(|&(_, c)| c == class)?;
    let (address, _) = kept.blocks[i];
    kept.len -= 1;
    kept.blocks[i] = kept.blocks[kept.len];
    kept.bytes -= class;
    KEPT_COUNT.store(kept.len, Ordering::Relaxed);
    LAST_USE_MS.store(now_ms(), Ordering::Relaxed);
    REUSED.fetch_add(1, Ordering::Relaxed);
    Some(address as *mut u8)
}

/// # Safety
/// As `GlobalAlloc::alloc`, for a layout with [`keepable`] alignment.
pub(super) unsafe fn alloc(size: usize) -> *mut u8 {
    let class = class_of(size);
    match take(class) {
        Some(p) => p,
        // SAFETY: malloc has no preconditions.
        None => unsafe { libc::malloc(class) }.cast(),
    }
}

/// # Safety
/// As `GlobalAlloc::alloc_zeroed`, for a layout with [`keepable`] alignment.
pub(super) unsafe fn alloc_zeroed(size: usize) -> *mut u8 {
    let class = class_of(size);
    match take(class) {
        Some(p) => {
            // SAFETY: the kept block has `class >= size` bytes.
            unsafe { std::ptr::write_bytes(p, 0, size) };
            p
        }
        // SAFETY: calloc has no preconditions.
        None => unsafe { libc::calloc(1, class) }.cast(),
    }
}

/// # Safety
/// `p` came from [`alloc`], [`alloc_zeroed`] or [`realloc`] with `size`.
pub(super) unsafe fn dealloc(p: *mut u8, size: usize) {
    let class = class_of(size);
    {
        let mut kept = lock();
        if kept.len < KEEP_BLOCKS && kept.bytes + class <= KEEP_BYTES {
            let len = kept.len;
            kept.blocks[len] = (p as usize, class);
            kept.len += 1;
            kept.bytes += class;
            KEPT_COUNT.store(kept.len, Ordering::Relaxed);
            LAST_USE_MS.store(now_ms(), Ordering::Relaxed);
            return;
        }
    }
    // SAFETY: the block came from the C library's malloc.
    unsafe { libc::free(p.cast()) }
}

/// # Safety
/// `p` came from this module with `size`; `new_size` is at least `LARGE`.
pub(super) unsafe fn realloc(p: *mut u8, size: usize, new_size: usize) -> *mut u8 {
    let class = class_of(new_size);
    if class == class_of(size) {
        return p;
    }
    // Remapped by the C library where it can, not copied.
    // SAFETY: the block came from the C library's malloc.
    unsafe { libc::realloc(p.cast(), class) }.cast()
}

/// Hands the kept blocks back to the system when none was used for
/// [`KEEP_IDLE`]; cheap when nothing is kept.
pub(super) fn release_if_idle() {
    if KEPT_COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let idle_for = now_ms().saturating_sub(LAST_USE_MS.load(Ordering::Relaxed));
    if u128::from(idle_for) >= KEEP_IDLE.as_millis() {
        release_all();
    }
}

/// Hands every kept block back to the system.
pub(super) fn release_all() {
    let mut kept = lock();
    for &(address, _) in &kept.blocks[..kept.len] {
        // SAFETY: each kept block came from the C library's malloc and is no
        // one's since it was kept.
        unsafe { libc::free(address as *mut libc::c_void) };
    }
    kept.len = 0;
    kept.bytes = 0;
    KEPT_COUNT.store(0, Ordering::Relaxed);
}

/// Blocks kept now, and bytes they hold.
pub(super) fn kept() -> (usize, usize) {
    let kept = lock();
    (kept.len, kept.bytes)
}

/// Large allocations served by a kept block since start.
#[cfg(test)]
pub(super) fn reused() -> u64 {
    REUSED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_up_to_their_class() {
        assert_eq!(class_of(1 << 20), 1 << 20);
        assert_eq!(class_of((1 << 20) + 1), (1 << 20) + CLASS);
        assert_eq!(class_of(usize::MAX), usize::MAX);
    }
}
