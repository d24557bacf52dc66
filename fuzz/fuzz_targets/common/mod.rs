//! What the targets share: reading an input piece by piece, a guard that turns
//! any single huge allocation into a crash, scratch directories, and writing
//! the seeds each target synthesizes.
//!
//! Inputs that carry several parts use one layout everywhere: single bytes,
//! big-endian u16s, and chunks (a u16 length, then that many bytes, cut short
//! at the end of the input). `Seed` writes the same layout.

#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::PathBuf;

// ---------------------------------------------------------------------------
// Bounded allocation
// ---------------------------------------------------------------------------

/// No input of a few kilobytes may make kshim ask for more than this in one
/// allocation: a request this large comes from a length or count field that
/// was trusted before it was checked. libFuzzer's -rss_limit_mb catches memory
/// that is touched; this catches reservations that are not.
pub const MAX_ALLOCATION: usize = 64 << 20;

pub struct BoundedAllocator;

fn too_large(size: usize) -> ! {
    // The message is built in a stack buffer; only the stack trace after it
    // allocates (small amounts, which this allocator lets through).
    let mut digits = [0u8; 20];
    let mut n = size;
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(b"\n==kshim-fuzz== allocation of ");
    let _ = err.write_all(&digits[i..]);
    let _ = err.write_all(
        b" bytes in one request (more than MAX_ALLOCATION): an unchecked length field\n",
    );
    let _ = writeln!(err, "{}", std::backtrace::Backtrace::force_capture());
    std::process::abort();
}

unsafe impl GlobalAlloc for BoundedAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            too_large(layout.size());
        }
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            too_large(layout.size());
        }
        System.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            too_large(new_size);
        }
        System.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

// ---------------------------------------------------------------------------
// Reading inputs
// ---------------------------------------------------------------------------

pub struct Input<'a> {
    data: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte; 0 past the end.
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.byte(), self.byte()])
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// A u16 length, then up to that many bytes.
    pub fn chunk(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.take(n)
    }

    pub fn rest(self) -> &'a [u8] {
        self.data
    }
}

/// Builds an input in the layout `Input` reads.
#[derive(Default)]
pub struct Seed(pub Vec<u8>);

impl Seed {
    pub fn new() -> Seed {
        Seed::default()
    }

    pub fn byte(mut self, b: u8) -> Seed {
        self.0.push(b);
        self
    }

    pub fn u16(mut self, v: u16) -> Seed {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    pub fn chunk(mut self, bytes: &[u8]) -> Seed {
        let n = u16::try_from(bytes.len()).expect("a seed chunk fits a u16 length");
        self.0.extend_from_slice(&n.to_be_bytes());
        self.0.extend_from_slice(bytes);
        self
    }

    pub fn bytes(mut self, bytes: &[u8]) -> Seed {
        self.0.extend_from_slice(bytes);
        self
    }

    pub fn done(self) -> Vec<u8> {
        self.0
    }
}

// ---------------------------------------------------------------------------
// Scratch directories and seeds
// ---------------------------------------------------------------------------

/// A fresh, empty directory for this process: under `KSHIM_FUZZ_TMP` when set
/// (scripts/fuzz.sh sets it and removes it afterwards), else in memory under
/// /dev/shm when there is one, else the system's temporary directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    let base = match std::env::var_os("KSHIM_FUZZ_TMP") {
        Some(dir) => PathBuf::from(dir),
        None if std::path::Path::new("/dev/shm").is_dir() => PathBuf::from("/dev/shm"),
        None => std::env::temp_dir(),
    };
    let dir = base.join(format!("kshim-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create scratch directory {}: {e}", dir.display()));
    dir
}

/// With `KSHIM_FUZZ_WRITE_SEEDS=DIR` in the environment, writes the seeds a
/// target synthesizes into DIR (as `gen-<name>`) and exits: how the generated
/// part of `fuzz/seeds/<target>/` is made (`scripts/fuzz.sh --write-seeds`).
pub fn write_seeds_if_asked(seeds: impl FnOnce() -> Vec<(String, Vec<u8>)>) {
    let Some(dir) = std::env::var_os("KSHIM_FUZZ_WRITE_SEEDS") else {
        return;
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("seed directory");
    let seeds = seeds();
    for (name, bytes) in &seeds {
        std::fs::write(dir.join(format!("gen-{name}")), bytes).expect("writing a seed");
    }
    println!("wrote {} seeds to {}", seeds.len(), dir.display());
    std::process::exit(0);
}
