//! What /proc says of a process (kshim, or this one) and of the machine: CPU
//! time, minor page faults, memory, open descriptors, the open-file limit and
//! listening ports. Reads only; a figure /proc does not give is `None` or NaN.

use std::collections::BTreeSet;

fn proc_read(pid: u32, what: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/{what}")).ok()
}

/// utime + stime, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = proc_read(pid, "stat")?;
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state is field 3, utime 14 and stime 15.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks as f64 / hz.max(1) as f64)
}

/// CPU seconds the whole machine spent busy (every CPU, /proc/stat), and
/// this process (the clients and the fake upstream): with kshim's, what
/// other processes took during the rounds.
pub(super) fn machine_and_own_busy_s() -> (f64, f64) {
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let machine = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|t| {
            let line = t.lines().next()?.strip_prefix("cpu ")?.to_owned();
            let v: Vec<u64> = line
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            // user nice system idle iowait irq softirq steal (guest time is
            // already in user).
            let busy: u64 = v.iter().take(8).sum::<u64>() - v.get(3)? - v.get(4)?;
            Some(busy as f64 / hz)
        })
        .unwrap_or(f64::NAN);
    (machine, cpu_seconds(std::process::id()).unwrap_or(f64::NAN))
}

/// The run time of every thread of `pid` (schedstat's first field), in
/// seconds: nanosecond resolution where utime and stime have the clock tick's.
fn sched_seconds(pid: u32) -> Option<f64> {
    let mut ns = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        if let Ok(s) = std::fs::read_to_string(task.path().join("schedstat")) {
            ns += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(ns as f64 / 1e9)
}

/// Minor page faults (a page touched for the first time: for kshim, mostly
/// the pages of large blocks mapped afresh), from /proc/PID/stat.
fn minor_faults(pid: u32) -> Option<u64> {
    let stat = proc_read(pid, "stat")?;
    let after = &stat[stat.rfind(')')? + 1..];
    // minflt is field 10; after the command, field 3 comes first.
    after.split_whitespace().nth(7)?.parse().ok()
}

/// A process's CPU time and minor page faults: so far, or between two readings.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cpu {
    /// utime + stime, in seconds (clock-tick resolution).
    pub(super) ticks_s: f64,
    /// Every thread's schedstat run time, in seconds.
    pub(super) sched_s: f64,
    pub(super) minflt: f64,
}

pub(super) fn cpu(pid: u32) -> Cpu {
    Cpu {
        ticks_s: cpu_seconds(pid).unwrap_or(f64::NAN),
        sched_s: sched_seconds(pid).unwrap_or(f64::NAN),
        minflt: minor_faults(pid).map_or(f64::NAN, |n| n as f64),
    }
}

/// A `VmRSS:`-style line of /proc/PID/status, in KiB.
pub(super) fn status_kib(pid: u32, key: &str) -> Option<u64> {
    proc_read(pid, "status")?
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub(super) fn fd_count(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

pub(super) fn soft_nofile(pid: u32) -> Option<u64> {
    proc_read(pid, "limits")?
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// The TCP ports `pid` listens on (its sockets in LISTEN state).
pub(super) fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let mut inodes = BTreeSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for entry in dir.flatten() {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                let t = target.to_string_lossy();
                if let Some(n) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    if let Ok(n) = n.parse::<u64>() {
                        inodes.insert(n);
                    }
                }
            }
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["net/tcp", "net/tcp6"] {
        let Some(text) = proc_read(pid, table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 10 || f[3] != "0A" {
                continue;
            }
            let inode: u64 = f[9].parse().unwrap_or(0);
            if !inodes.contains(&inode) {
                continue;
            }
            if let Some(port) = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
            {
                ports.insert(port);
            }
        }
    }
    ports
}
