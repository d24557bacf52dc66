//! How much memory kshim may use, and the defaults that follow from it: the
//! heap's ceiling (`ceiling`) and the global budget for frames in transit.
//!
//! In a container the host's MemTotal says nothing about what kshim may hold:
//! a pod limited to 512 MiB on a 64 GiB node is killed by the kernel at 512 MiB.
//! The limit of the memory cgroup kshim runs in comes first (cgroup v2
//! `memory.max`, v1 `memory.limit_in_bytes`, the lowest of its cgroup and every
//! ancestor's), then MemTotal.

use std::fmt;
use std::path::{Path, PathBuf};

/// A v1 limit at or above this is "no limit" (the kernel shows unlimited as
/// the largest page-aligned i64).
const V1_UNLIMITED: u64 = 1 << 60;

/// The memory kshim may use, and where that figure came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryLimit {
    pub bytes: u64,
    pub source: LimitSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitSource {
    /// The file the limit was read from.
    Cgroup(PathBuf),
    MemTotal,
    /// Neither could be read; a stated guess.
    Assumed,
}

impl fmt::Display for LimitSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitSource::Cgroup(path) => {
                write!(f, "the memory cgroup's limit ({})", path.display())
            }
            LimitSource::MemTotal => f.write_str("the machine's memory (MemTotal)"),
            LimitSource::Assumed => {
                f.write_str("an assumed 4 GiB (no cgroup limit or MemTotal could be read)")
            }
        }
    }
}

/// The limit in force for this process.
pub fn memory_limit() -> MemoryLimit {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    if let Some(limit) = cgroup_limit(Path::new("/sys/fs/cgroup"), &cgroup) {
        return limit;
    }
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        });
    match total {
        Some(bytes) => MemoryLimit {
            bytes,
            source: LimitSource::MemTotal,
        },
        None => MemoryLimit {
            bytes: 4 << 30,
            source: LimitSource::Assumed,
        },
    }
}

/// The lowest memory limit set on the cgroup named in `proc_self_cgroup` (the
/// text of /proc/self/cgroup) or on any of its ancestors, under the cgroup
/// mount `root`: the v1 memory controller's, else v2's.
fn cgroup_limit(root: &Path, proc_self_cgroup: &str) -> Option<MemoryLimit> {
    let mut v1 = None;
    let mut v2 = None;
    for line in proc_self_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            v1 = Some(path);
        } else if id == "0" && controllers.is_empty() {
            v2 = Some(path);
        }
    }
    let lowest = |mounts: &[PathBuf], path: &str, file: &str, parse: fn(&str) -> Option<u64>| {
        let mut best: Option<MemoryLimit> = None;
        for mount in mounts {
            let mut dir = Path::new(path.trim_start_matches('/'));
            loop {
                let candidate = mount.join(dir).join(file);
                if let Some(bytes) = std::fs::read_to_string(&candidate)
                    .ok()
                    .and_then(|t| parse(t.trim()))
                {
                    if best.as_ref().is_none_or(|b| bytes < b.bytes) {
                        best = Some(MemoryLimit {
                            bytes,
                            source: LimitSource::Cgroup(candidate),
                        });
                    }
                }
                match dir.parent() {
                    Some(parent) => dir = parent,
                    None => break,
                }
            }
        }
        best
    };
    let v1_limit = v1.and_then(|path| {
        lowest(&[root.join("memory")], path, "memory.limit_in_bytes", |t| {
            t.parse::<u64>().ok().filter(|&n| n < V1_UNLIMITED)
        })
    });
    v1_limit.or_else(|| {
        v2.and_then(|path| {
            lowest(
                &[root.to_owned(), root.join("unified")],
                path,
                "memory.max",
                |t| t.parse::<u64>().ok(),
            )
        })
    })
}

/// The default of `max_queued_request_bytes`, and why: a quarter of a cgroup's
/// limit (the process's own memory, of which kshim needs some for its
/// connections and answers), or a tenth of the machine's (shared with everything
/// else on it); never below what one frame of `max_frame_bytes` needs, and on a
/// machine at least two of them.
pub fn default_frame_budget(max_frame_bytes: usize, limit: &MemoryLimit) -> usize {
    let bytes = usize::try_from(limit.bytes).unwrap_or(usize::MAX);
    match limit.source {
        LimitSource::Cgroup(_) => (bytes / 4).max(max_frame_bytes),
        LimitSource::MemTotal | LimitSource::Assumed => {
            (bytes / 10).max(max_frame_bytes.saturating_mul(2))
        }
    }
}

/// The default of `max_memory_bytes`, the heap's ceiling, and why: half a
/// cgroup's limit, or a quarter of the machine's memory (shared with everything
/// else on it). The other half of a container's limit is the allocator's own
/// overhead, code and stacks, and the room the connections open when shedding
/// starts may still take (`ceiling::CONNECTION_ALLOWANCE` each).
pub fn default_ceiling(limit: &MemoryLimit) -> u64 {
    match limit.source {
        LimitSource::Cgroup(_) => limit.bytes / 2,
        LimitSource::MemTotal | LimitSource::Assumed => limit.bytes / 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn the_lowest_limit_of_the_cgroup_and_its_ancestors_counts() {
        let root = tempfile::tempdir().unwrap();
        let v1 = root.path().join("memory");
        write(&v1.join("memory.limit_in_bytes"), "9223372036854771712\n");
        write(&v1.join("pods/memory.limit_in_bytes"), "1073741824\n");
        write(
            &v1.join("pods/kshim/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        let text = "4:memory:/pods/kshim\n0::/\n";
        let limit = cgroup_limit(root.path(), text).unwrap();
        assert_eq!(limit.bytes, 1 << 30);
        assert_eq!(
            limit.source,
            LimitSource::Cgroup(v1.join("pods/memory.limit_in_bytes"))
        );
        // Unlimited all the way up: no cgroup limit.
        write(
            &v1.join("pods/memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        assert_eq!(cgroup_limit(root.path(), text), None);
    }

    #[test]
    fn cgroup_v2_memory_max_is_read_and_max_means_none() {
        let root = tempfile::tempdir().unwrap();
        write(&root.path().join("kubepods/pod1/memory.max"), "536870912\n");
        write(&root.path().join("kubepods/memory.max"), "max\n");
        let limit = cgroup_limit(root.path(), "0::/kubepods/pod1\n").unwrap();
        assert_eq!(limit.bytes, 512 << 20);
        write(&root.path().join("kubepods/pod1/memory.max"), "max\n");
        assert_eq!(cgroup_limit(root.path(), "0::/kubepods/pod1\n"), None);
    }

    #[test]
    fn the_default_ceiling_is_half_a_containers_limit_and_a_quarter_of_a_machines() {
        let cgroup = MemoryLimit {
            bytes: 256 << 20,
            source: LimitSource::Cgroup(PathBuf::from("memory.max")),
        };
        assert_eq!(default_ceiling(&cgroup), 128 << 20);
        let host = MemoryLimit {
            bytes: 24 << 30,
            source: LimitSource::MemTotal,
        };
        assert_eq!(default_ceiling(&host), 6 << 30);
    }

    #[test]
    fn the_default_budget_fits_the_limit_and_one_frame() {
        let frame = 100 << 20;
        let cgroup = |bytes| MemoryLimit {
            bytes,
            source: LimitSource::Cgroup(PathBuf::from("memory.max")),
        };
        assert_eq!(default_frame_budget(frame, &cgroup(512 << 20)), 128 << 20);
        assert_eq!(default_frame_budget(frame, &cgroup(256 << 20)), frame);
        let host = MemoryLimit {
            bytes: 64 << 30,
            source: LimitSource::MemTotal,
        };
        assert_eq!(default_frame_budget(frame, &host), (64 << 30) / 10);
    }
}
