//! The kshim child: its open-file limit, its config (the fake as its upstream,
//! ephemeral ports everywhere), starting it and waiting until it is ready, and
//! stopping it by its PID. Nothing here measures it (procfs.rs does).

use super::HOST;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A running kshim, and how long it took to come up.
pub(super) struct Kshim {
    child: tokio::process::Child,
    pub(super) pid: u32,
    pub(super) dir: PathBuf,
    /// Its bootstrap listener's address, as it printed it.
    pub(super) bootstrap: String,
    pub(super) listening_after: Duration,
    pub(super) ready_after: Duration,
}

pub(super) fn log_tail(dir: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(dir.join("kshim.log")).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// The open-file soft limit of this process raised to `wanted` (the hard
/// limit when `None`), for kshim to inherit: (before, after).
pub(super) fn raise_nofile(wanted: Option<u64>) -> Result<(u64, u64), String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err("getrlimit(RLIMIT_NOFILE) failed".into());
    }
    let before = limit.rlim_cur;
    let target = wanted.unwrap_or(limit.rlim_max).min(limit.rlim_max);
    if target != before {
        let raised = libc::rlimit {
            rlim_cur: target,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(format!("setrlimit(RLIMIT_NOFILE, {target}) failed"));
        }
    }
    Ok((before, target))
}

/// The limits kshim is configured with, computed from the size of the answer.
pub(super) struct KshimLimits {
    pub(super) max_response_bytes: usize,
    pub(super) max_queued_request_bytes: usize,
}

/// kshim.toml in `dir` (with `dir`/data as its data directory): `upstream`
/// as its bootstrap, `max_brokers` at least `brokers`.
pub(super) fn write_config(
    dir: &Path,
    upstream: &str,
    brokers: i32,
    log_level: &str,
    limits: &KshimLimits,
) -> Result<PathBuf, String> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let text = format!(
        r#"listen = "{HOST}:0"
data_dir = {data:?}
max_queued_request_bytes = {queued}

[upstream]
bootstrap = "{upstream}"
max_brokers = {max_brokers}
max_response_bytes = {max_response}

[upstream.listeners]
port_base = 0

[admin]
listen = "{HOST}:0"

[log]
level = {level:?}
"#,
        data = data.display().to_string(),
        queued = limits.max_queued_request_bytes,
        max_brokers = (brokers as usize).max(1000),
        max_response = limits.max_response_bytes,
        level = log_level,
    );
    let path = dir.join("kshim.toml");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// `GET /readyz` on the admin API: its status code.
async fn readyz(admin: &str) -> Option<u16> {
    let mut s = TcpStream::connect(admin).await.ok()?;
    s.write_all(b"GET /readyz HTTP/1.1\r\nHost: kshim\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    std::str::from_utf8(out.get(..12)?)
        .ok()?
        .strip_prefix("HTTP/1.1 ")?
        .parse()
        .ok()
}

impl Kshim {
    /// Starts kshim and waits until it is ready; on any failure it is killed
    /// (its `Child` is dropped with `kill_on_drop`).
    pub(super) async fn start(
        binary: &Path,
        config: &Path,
        dir: &Path,
        timeout: Duration,
    ) -> Result<Kshim, String> {
        let log =
            std::fs::File::create(dir.join("kshim.log")).map_err(|e| format!("kshim.log: {e}"))?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(binary)
            .arg("serve")
            .arg("--config")
            .arg(config)
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env("RUST_BACKTRACE", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let pid = child.id().ok_or("kshim exited at once")?;
        let stdout = child.stdout.take().ok_or("kshim's stdout")?;
        let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::new(stdout).lines();
            // Read to the end, so that kshim never blocks on a full pipe.
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = lines_tx.send(line);
            }
        });
        let deadline = started + timeout;
        let fail = |why: String| {
            format!(
                "{why}\n--- the last lines of {}:\n{}",
                dir.join("kshim.log").display(),
                log_tail(dir, 40)
            )
        };
        let mut bootstrap = None;
        let mut admin = None;
        while bootstrap.is_none() || admin.is_none() {
            tokio::select! {
                line = lines.recv() => {
                    let Some(line) = line else {
                        let status = child.wait().await.map(|s| s.to_string()).unwrap_or_default();
                        return Err(fail(format!("kshim exited during startup ({status})")));
                    };
                    if let Some(a) = line.strip_prefix("kshim listening on ") {
                        bootstrap = Some(a.trim().to_owned());
                    } else if let Some(a) = line.strip_prefix("kshim admin API on http://") {
                        admin = Some(a.trim().to_owned());
                    }
                }
                status = child.wait() => {
                    let status = status.map(|s| s.to_string()).unwrap_or_default();
                    return Err(fail(format!("kshim exited during startup ({status})")));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    return Err(fail(format!("kshim printed no listening address within {timeout:?}")));
                }
            }
        }
        let listening_after = started.elapsed();
        let admin = admin.unwrap_or_default();
        loop {
            if readyz(&admin).await == Some(200) {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(fail(format!("kshim exited before it was ready ({status})")));
            }
            if Instant::now() >= deadline {
                return Err(fail(format!(
                    "kshim's /readyz did not answer 200 within {timeout:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Kshim {
            child,
            pid,
            dir: dir.to_owned(),
            bootstrap: bootstrap.unwrap_or_default(),
            listening_after,
            ready_after: started.elapsed(),
        })
    }

    /// SIGINT by its PID (a stop without the drain delay), then SIGKILL when it
    /// has not exited within 15 s. How it ended.
    pub(super) async fn stop(mut self) -> String {
        // SAFETY: kill only sends a signal to the process we started.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGINT);
        }
        match tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await {
            Ok(Ok(status)) => format!("stopped by SIGINT ({status})"),
            Ok(Err(e)) => format!("cannot wait for kshim: {e}"),
            Err(_) => {
                let _ = self.child.kill().await;
                "killed: still running 15 s after SIGINT".into()
            }
        }
    }
}
