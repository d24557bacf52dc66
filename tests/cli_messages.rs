//! What `kshim` prints when it cannot start: every error once, and a wildcard
//! listen address refused rather than advertised.

use std::process::Command;

fn serve(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .arg("serve")
        .args(["--data-dir", dir.path().to_str().unwrap()])
        .args(args)
        .output()
        .expect("kshim runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_wildcard_listen_without_an_advertised_address_is_refused_once() {
    let (code, stderr) = serve(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, 1, "{stderr}");
    let line = "listen: 0.0.0.0:0 listens on every address";
    assert_eq!(stderr.matches(line).count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("configuration error(s)").count(),
        1,
        "{stderr}"
    );
}

#[test]
fn a_port_in_use_is_named_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = serve(&["--listen", &addr]);
    assert_eq!(code, 1, "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("kshim: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert_eq!(errors[0].matches(&addr).count(), 1, "{stderr}");
}

#[test]
fn logs_written_to_a_pipe_carry_no_colour_codes() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (_, stderr) = serve(&["--listen", &addr]);
    assert!(
        stderr.contains(" INFO "),
        "a log line was written: {stderr}"
    );
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn a_misspelt_log_level_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kshim.toml");
    std::fs::write(&config, "[log]\nlevel = \"warning\"\n").unwrap();
    let (code, stderr) = serve(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("\"warning\" is not a log level"),
        "{stderr}"
    );
}
