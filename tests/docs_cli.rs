//! docs/reference/cli.md against the `kshim` binary's own help, both ways: each
//! `## kshim SUBCOMMAND` section names every option that the subcommand (or any
//! of its own subcommands) takes, and no option it does not take. An option is
//! named where a table row starts with it (`| \`--listen HOST:PORT\` |`).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_kshim"))
        .args(args)
        .arg("--help")
        .output()
        .expect("kshim runs");
    assert!(out.status.success(), "kshim {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The words of a help text's section ("Commands:", "Options:") that start its lines.
fn section<'a>(text: &'a str, title: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| l.trim() != title)
        .skip(1)
        .take_while(|l| !l.is_empty() && l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect()
}

/// Every `--option` a subcommand takes, its own subcommands' included.
fn options_of(path: &mut Vec<&'static str>, out: &mut BTreeSet<String>) {
    let text = help(path);
    for line in text.lines() {
        let line = line.trim_start();
        let line = line.strip_prefix("-h, ").unwrap_or(line);
        if let Some(rest) = line.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() && name != "help" && name != "version" {
                out.insert(format!("--{name}"));
            }
        }
    }
    for sub in section(&text, "Commands:") {
        if sub != "help" {
            let sub: &'static str = Box::leak(sub.to_owned().into_boxed_str());
            path.push(sub);
            options_of(path, out);
            path.pop();
        }
    }
}

/// The options cli.md's `## kshim NAME` sections name, by NAME.
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/reference/cli.md"),
    )
    .expect("cli.md");
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        if let Some(title) = line.strip_prefix("## kshim ") {
            let name = title.split_whitespace().next().unwrap_or("").to_owned();
            out.entry(name.clone()).or_default();
            current = Some(name);
            continue;
        }
        if line.starts_with("## ") {
            current = None;
        }
        let (Some(name), Some(first)) = (&current, line.strip_prefix("| ")) else {
            continue;
        };
        let first = first.split(" | ").next().unwrap_or("");
        for word in first.split('`').skip(1).step_by(2) {
            for option in word.split([',', ' ']).filter(|w| w.starts_with("--")) {
                let option: String = option
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                out.get_mut(name).expect("section").insert(option);
            }
        }
    }
    out
}

#[test]
fn cli_md_names_every_option_of_every_subcommand_and_no_other() {
    let top = help(&[]);
    let documented = documented();
    let mut report = String::new();
    for sub in section(&top, "Commands:") {
        if sub == "help" {
            continue;
        }
        let sub: &'static str = Box::leak(sub.to_owned().into_boxed_str());
        let mut taken = BTreeSet::new();
        options_of(&mut vec![sub], &mut taken);
        // `kshim config` has one subcommand, documented as `## kshim config check`.
        let Some(named) = documented.get(sub) else {
            report.push_str(&format!(
                "kshim {sub}: no `## kshim {sub}` section in cli.md\n"
            ));
            continue;
        };
        let missing: Vec<&String> = taken.difference(named).collect();
        let unknown: Vec<&String> = named.difference(&taken).collect();
        if !missing.is_empty() {
            report.push_str(&format!(
                "kshim {sub} takes, but cli.md does not name: {missing:?}\n"
            ));
        }
        if !unknown.is_empty() {
            report.push_str(&format!(
                "cli.md names, but kshim {sub} does not take: {unknown:?}\n"
            ));
        }
    }
    assert!(
        report.is_empty(),
        "docs/reference/cli.md and the binary disagree:\n{report}"
    );
}
