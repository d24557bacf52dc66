//! What `kshim` prints when it cannot start: every error once, and a wildcard
//! listen address refused rather than advertised.

use std::process::Command;

/// Runs `kshim ARGS` with `env` added; (exit code, stdout, stderr).
fn kshim(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("kshim runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kshim serve ARGS` on a data directory of its own; (exit code, stderr).
fn serve(args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = ["serve", "--data-dir", dir.path().to_str().unwrap()];
    let (code, _, stderr) = kshim(&[&data[..], args].concat(), &[]);
    (code, stderr)
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

fn config_check(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    kshim(&[&["config", "check"][..], args].concat(), env)
}

#[test]
fn config_check_needs_something_to_check() {
    let (code, stdout, stderr) = config_check(&[], &[]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(stderr.contains("nothing to check"), "{stderr}");
}

/// `config check` refuses what `kshim serve` would refuse: unresolved
/// placeholders, TLS files that are missing or do not match, cross-key rules,
/// policies that do not compile. Each problem is named by its key.
#[test]
fn config_check_refuses_what_serve_would_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let a = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let b = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert = write("a.pem", &a.cert.pem());
    let key = write("a.key", &a.key_pair.serialize_pem());
    let other_key = write("b.key", &b.key_pair.serialize_pem());
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();

    let valid = write(
        "valid.toml",
        &format!(
            "data_dir = \"{data}\"\n[tls]\ncertificate = \"{cert}\"\nkey = \"{key}\"\n\
             [admin]\ntoken = \"${{env:KSHIM_CHECK_TOKEN}}\"\n"
        ),
    );
    let (code, stdout, stderr) = config_check(&["--config", &valid], &[("KSHIM_CHECK_TOKEN", "t")]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("the configuration is valid"), "{stdout}");

    for (name, text, env, wanted) in [
        (
            "placeholder",
            format!(
                "data_dir = \"{data}\"\n[admin]\ntoken = \"${{env:KSHIM_CHECK_UNSET_VARIABLE}}\"\n"
            ),
            vec![],
            "admin.token",
        ),
        (
            "missing certificate",
            format!(
                "data_dir = \"{data}\"\n[tls]\ncertificate = \"{}/nope.pem\"\nkey = \"{key}\"\n",
                dir.path().display()
            ),
            vec![],
            "tls.certificate",
        ),
        (
            "key of another certificate",
            format!(
                "data_dir = \"{data}\"\n[tls]\ncertificate = \"{cert}\"\nkey = \"{other_key}\"\n"
            ),
            vec![],
            "tls.",
        ),
        (
            "wildcard listen",
            format!("data_dir = \"{data}\"\nlisten = \"0.0.0.0:19092\"\n"),
            vec![],
            "listen: 0.0.0.0:19092 listens on every address",
        ),
        (
            "cluster without upstream",
            format!("data_dir = \"{data}\"\n[cluster]\nid = \"orders\"\ninstance_id = \"a\"\n"),
            vec![],
            "[upstream] (or --upstream) is required",
        ),
        (
            "policy that does not compile",
            format!("data_dir = \"{data}\"\n[policy.create_topic]\ndenied_names = [\"(\"]\n"),
            vec![],
            "policy.create_topic.denied_names",
        ),
    ] {
        let path = write(&format!("{}.toml", name.replace(' ', "-")), &text);
        let env: Vec<(&str, &str)> = env;
        let (code, stdout, stderr) = config_check(&["--config", &path], &env);
        assert_eq!(code, 2, "{name}: {stdout}{stderr}");
        assert!(
            stderr.contains(wanted),
            "{name}: wanted {wanted:?} in {stderr}"
        );
        assert!(
            stderr.contains("kshim serve would refuse this config"),
            "{name}: {stderr}"
        );
        assert!(!stdout.contains("is valid"), "{name}: {stdout}");
    }
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kshim.toml");
    std::fs::write(&config, "[log]\nformat = \"json\"\n").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (code, stderr) = serve(&["--config", config.to_str().unwrap(), "--listen", &addr]);
    assert_eq!(code, 1, "{stderr}");
    let logged: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| !l.starts_with("kshim: "))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(!logged.is_empty(), "{stderr}");
    assert!(
        logged
            .iter()
            .all(|v| v["level"].is_string() && v["fields"]["message"].is_string()),
        "{stderr}"
    );

    std::fs::write(&config, "[log]\nformat = \"yaml\"\n").unwrap();
    let (code, stderr) = serve(&["--config", config.to_str().unwrap(), "--listen", &addr]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("log.format: \"yaml\": expected \"text\" or \"json\""),
        "{stderr}"
    );
}

#[test]
fn an_older_release_on_a_newer_state_is_refused_in_release_names_with_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let mut first = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .args(["serve", "--data-dir", data, "--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kshim runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !dir.path().join("state.json").exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = first.kill();
    let _ = first.wait();
    let (code, _, stderr) = kshim(
        &[
            "serve",
            "--data-dir",
            data,
            "--listen",
            "127.0.0.1:0",
            "--kafka-release",
            "4.1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("level 33 (4.4-IV2)") && stderr.contains("(3.3-IV3 to 4.1-IV1)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("new data directory")
            && stderr.contains("kshim features downgrade --release-version"),
        "{stderr}"
    );
}

/// One HTTP/1.1 GET; the status code.
fn http_status(addr: &str, path: &str, token: Option<&str>) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

#[test]
fn admin_listen_serves_the_admin_api_without_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut kshim = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .args([
            "serve",
            "--data-dir",
            dir.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--admin-listen", &addr])
        .env("KSHIM_ADMIN_TOKEN", "t0ken")
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kshim runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut status = None;
    while status.is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        status = http_status(&addr, "/metrics", Some("t0ken"));
    }
    let without = http_status(&addr, "/metrics", None);
    let _ = kshim.kill();
    let _ = kshim.wait();
    assert_eq!((status, without), (Some(200), Some(401)));
}

#[test]
fn a_busy_admin_port_fails_the_start_before_any_state_is_written() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (code, _, stderr) = kshim(
        &[
            "serve",
            "--data-dir",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            &addr,
        ],
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains(&addr), "{stderr}");
    assert!(
        !data.join("state.json").exists(),
        "a failed start wrote the feature state"
    );
}
