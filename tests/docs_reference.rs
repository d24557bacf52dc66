//! The reference pages checked against the code, both ways, so that neither can
//! change without the other:
//! - docs/reference/config.md against the key paths the config parser accepts
//!   (`kshim::config::accepted_keys`);
//! - docs/reference/metrics.md against the series names `/metrics` serves;
//! - the Grafana dashboard (deploy/grafana/kshim-dashboard.json): every series its
//!   queries name is served, and every label they group by is one metrics.md
//!   gives that series.
//!
//! Key paths are written as `kshim::config::key_paths` writes them:
//! `upstream.tls.ca`, `policy.validators[].min` (every item of a list of tables
//! takes the same keys), `features.supported."NAME".min` (a name the operator
//! chooses, in capitals and quotes as config.md writes it). Some tables are
//! read without the walker that records keys, and are covered this way:
//! - the tables whose keys the operator names (`max_connections_per_ip_overrides`,
//!   `features.supported`, `features.bootstrap`, `features.dependencies` and its
//!   `requires`, `upstream.listeners.ports`, `policy.create_topic.configs`): their
//!   loops record each key with the placeholder config.md uses ("IP", "NAME",
//!   "OTHER", "NODE", "KEY");
//! - `[[lab.scenarios]]`, read by serde: the keys of a scenario with every field
//!   given, serialized, under `lab.scenarios[]`;
//! - `[admin.tls]`, which config.md describes as a table with the keys of `[tls]`
//!   (`SAME_KEYS_AS` below).

use kshim::census::{Census, CensusConfig};
use kshim::config::{accepted_keys, key_paths};
use kshim::lab::Lab;
use kshim::metrics::{
    ClusterSnapshot, FrameBudgetGauge, FrameBudgetSnapshot, MemoryCeilingGauge,
    MemoryCeilingSnapshot, Metrics, Snapshot, UpstreamSnapshot,
};
use std::collections::BTreeSet;
use std::sync::Arc;

fn page(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs/reference")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names one side has and the other lacks, listed by name; `None` when
/// both have the same.
fn differences(
    code: &BTreeSet<String>,
    documented: &BTreeSet<String>,
    code_side: &str,
    page: &str,
) -> Option<String> {
    let undocumented: Vec<&str> = code.difference(documented).map(String::as_str).collect();
    let unknown: Vec<&str> = documented.difference(code).map(String::as_str).collect();
    if undocumented.is_empty() && unknown.is_empty() {
        return None;
    }
    let mut report = format!("{page} and {code_side} disagree.\n");
    for (heading, names) in [
        (format!("In {code_side} but not in {page}:"), undocumented),
        (format!("In {page} but not in {code_side}:"), unknown),
    ] {
        if !names.is_empty() {
            report.push_str(&heading);
            for name in names {
                report.push_str("\n  ");
                report.push_str(name);
            }
            report.push('\n');
        }
    }
    Some(report)
}

/// The texts between backticks.
fn backticked(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// One table of a page whose first column is headed `first_column`: the
/// heading above it and the first cell of each row.
struct Table {
    heading: String,
    first_cells: Vec<String>,
}

/// Every table of `page` whose first column is headed `first_column`, code
/// blocks left out (a `#` there is a comment, not a heading).
fn tables(page: &str, first_column: &str) -> Vec<Table> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut in_code = false;
    // Inside a table: `Some`, holding the table when it is of the kind asked for.
    let mut current: Option<Option<Table>> = None;
    for line in page.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        let row = line.strip_prefix('|').filter(|_| !in_code);
        let Some(row) = row else {
            out.extend(current.take().flatten());
            if line.starts_with('#') && !in_code {
                heading = line.trim_start_matches('#').trim().to_owned();
            }
            continue;
        };
        let first = row.split('|').next().unwrap_or("").trim().to_owned();
        match &mut current {
            None => {
                current = Some((first == first_column).then(|| Table {
                    heading: heading.clone(),
                    first_cells: Vec::new(),
                }))
            }
            Some(Some(table)) if !first.starts_with("---") => table.first_cells.push(first),
            Some(_) => {}
        }
    }
    out.extend(current.flatten());
    out
}

/// config.md describes `[admin.tls]` in one row of the `[admin]` table, as a
/// table with the keys of `[tls]`.
const SAME_KEYS_AS: [(&str, &str); 1] = [("admin.tls", "tls")];

/// The key paths config.md documents.
///
/// Each key table is read as the TOML it describes. A heading naming a table
/// (`` ## `[upstream]` ``) starts it with that table; in the key column,
/// - a table name (`` `[features.bootstrap]` ``, `` `[[policy.validators]]` ``)
///   holds for its row and the rows below, as a TOML table header does;
/// - a TOML snippet (`` `"NAME" = { min = A, max = B }` ``) gives the keys in
///   it, placeholder values (A, LEVEL, PORT) read as numbers;
/// - any other text between backticks is a key.
fn documented_keys(page: &str) -> Result<BTreeSet<String>, String> {
    let mut keys = BTreeSet::new();
    for table in tables(page, "key") {
        let mut text = String::new();
        if let Some(name) = backticked(&table.heading)
            .into_iter()
            .find(|t| t.starts_with('['))
        {
            text.push_str(name);
            text.push('\n');
        }
        for cell in &table.first_cells {
            let parts = backticked(cell);
            if parts.is_empty() {
                return Err(format!(
                    "a row under \"{}\" names no key in backticks: {cell}",
                    table.heading
                ));
            }
            for part in parts {
                if part.starts_with('[') {
                    text.push_str(part);
                } else if part.contains('=') {
                    text.push_str(&with_placeholder_values(part));
                } else {
                    text.push_str(part);
                    text.push_str(" = 0");
                }
                text.push('\n');
            }
        }
        let document: toml::Table = text.parse().map_err(|e| {
            format!(
                "the key table under \"{}\" does not read as TOML: {e}\n{text}",
                table.heading
            )
        })?;
        keys.extend(key_paths(&document));
    }
    for (table, like) in SAME_KEYS_AS {
        if keys.remove(table) {
            let borrowed: Vec<String> = keys
                .iter()
                .filter_map(|k| k.strip_prefix(&format!("{like}.")))
                .map(|rest| format!("{table}.{rest}"))
                .collect();
            keys.extend(borrowed);
        }
    }
    Ok(keys)
}

/// A snippet with each bare word in capitals outside quotes (a placeholder
/// value such as `LEVEL`) replaced by 0, so that it reads as TOML.
fn with_placeholder_values(snippet: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    let mut word = String::new();
    let mut quoted = false;
    let flush = |word: &mut String, out: &mut String| {
        let placeholder = word.chars().any(|c| c.is_ascii_uppercase())
            && !word.chars().any(|c| c.is_ascii_lowercase());
        out.push_str(if placeholder { "0" } else { word.as_str() });
        word.clear();
    };
    for c in snippet.chars() {
        if !quoted && (c.is_ascii_alphanumeric() || c == '_') {
            word.push(c);
            continue;
        }
        flush(&mut word, &mut out);
        if c == '"' {
            quoted = !quoted;
        }
        out.push(c);
    }
    flush(&mut word, &mut out);
    out
}

#[test]
fn config_md_names_every_key_the_config_accepts_and_no_other() {
    let documented = documented_keys(&page("config.md")).unwrap_or_else(|e| panic!("{e}"));
    if let Some(report) = differences(
        &accepted_keys(),
        &documented,
        "the config parser",
        "docs/reference/config.md",
    ) {
        panic!("{report}");
    }
}

/// A frame budget that is being watched, so that its series show.
struct WatchedBudget;

impl FrameBudgetGauge for WatchedBudget {
    fn snapshot(&self) -> FrameBudgetSnapshot {
        FrameBudgetSnapshot {
            held: 1,
            answers: 1,
            total: 2,
            waits: 3,
        }
    }
}

struct WatchedCeiling;

impl MemoryCeilingGauge for WatchedCeiling {
    fn snapshot(&self) -> MemoryCeilingSnapshot {
        MemoryCeilingSnapshot {
            ceiling: 2,
            held: 1,
            shedding: true,
            episodes: 1,
        }
    }
}

/// The names of the series `/metrics` serves, from its `# TYPE` lines (a
/// histogram's base name), with every optional part present. The snapshot is
/// written out field by field, so that a new part does not build until it is
/// given here too.
fn served_series() -> BTreeSet<String> {
    crate::ALLOCATOR.mark_installed();
    let metrics = Metrics::new();
    metrics.watch_frame_budget(Arc::new(WatchedBudget));
    metrics.watch_memory_ceiling(Arc::new(WatchedCeiling));
    let mut text = metrics.render(&Snapshot {
        epoch: 1,
        levels: vec![("metadata.version".into(), 27)],
        overrides: 1,
        certificate_not_after: vec![("client", 1_800_000_000)],
        conflicts: vec![("acme.widgets".into(), "Broker 2".into())],
        upstream: Some(UpstreamSnapshot {
            reachable: true,
            brokers: vec![(1, true)],
            refreshes_ok: 1,
            refreshes_failed: 1,
            stale_views: 1,
        }),
        cluster: Some(ClusterSnapshot {
            caught_up: true,
            reachable: true,
            applied_offset: 1,
            live_instances: 2,
            config_apply_failed: false,
        }),
    });
    // The admin API's /metrics adds the census's and the lab's series after
    // these (src/admin/mod.rs).
    Census::new(CensusConfig::default()).render_metrics(&mut text);
    Lab::new(Vec::new()).render_metrics(&mut text);
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// The `kshim_...` names in the first column of metrics.md's tables (a row may
/// name two series).
fn documented_series(page: &str) -> BTreeSet<String> {
    tables(page, "metric")
        .iter()
        .flat_map(|t| &t.first_cells)
        .flat_map(|cell| backticked(cell))
        .filter(|name| name.starts_with("kshim_"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn metrics_md_names_every_series_metrics_serves_and_no_other() {
    if let Some(report) = differences(
        &served_series(),
        &documented_series(&page("metrics.md")),
        "/metrics",
        "docs/reference/metrics.md",
    ) {
        panic!("{report}");
    }
}

#[test]
fn a_name_on_one_side_only_is_reported() {
    let with_extra_row = page("config.md").replacen(
        "| `data_dir` |",
        "| `data_dir_twice` | | | |\n| `data_dir` |",
        1,
    );
    let mut accepted = accepted_keys();
    accepted.insert("listen_twice".into());
    let report = differences(
        &accepted,
        &documented_keys(&with_extra_row).unwrap(),
        "the config parser",
        "config.md",
    )
    .expect("a key on one side only is a difference");
    for expected in [
        "In the config parser but not in config.md:\n  listen_twice\n",
        "In config.md but not in the config parser:\n  data_dir_twice\n",
    ] {
        assert!(report.contains(expected), "{expected:?} not in:\n{report}");
    }

    let with_extra_row = page("metrics.md").replacen(
        "| `kshim_config_overrides` |",
        "| `kshim_imaginary_total` | | |\n| `kshim_config_overrides` |",
        1,
    );
    let report = differences(
        &served_series(),
        &documented_series(&with_extra_row),
        "/metrics",
        "metrics.md",
    )
    .expect("a series on one side only is a difference");
    assert!(
        report.contains("In metrics.md but not in /metrics:\n  kshim_imaginary_total\n"),
        "{report}"
    );
}

#[test]
fn key_tables_read_as_the_toml_they_describe() {
    let page = "\
## `[admin]`

| key | default |
|---|---|
| `listen` | |
| `[admin.tls]` | with the keys of `[tls]` |

## `[tls]`

```toml
# a comment, not a heading
[tls]
```

| key | default |
|---|---|
| `ca` or `truststore` (+ `truststore_password`) | |

## Features

| key | meaning |
|---|---|
| `[features.dependencies]` `\"NAME\" = [{ level = L, requires = { \"OTHER\" = M } }]` | |
| `[[policy.validators]]` `key` | |
| `min`, `max` | |

| metric | what |
|---|---|
| `kshim_not_a_key` | |
";
    let keys = documented_keys(page).unwrap();
    let expected: BTreeSet<String> = [
        "admin.listen",
        "admin.tls.ca",
        "admin.tls.truststore",
        "admin.tls.truststore_password",
        "tls.ca",
        "tls.truststore",
        "tls.truststore_password",
        "features.dependencies.\"NAME\"[].level",
        "features.dependencies.\"NAME\"[].requires.\"OTHER\"",
        "policy.validators[].key",
        "policy.validators[].min",
        "policy.validators[].max",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(keys, expected);
    assert!(documented_keys("| key |\n|---|\n| listen |\n").is_err());
}

/// Each series metrics.md documents, with the labels in its row's second
/// column (backticked words).
fn documented_labels(page: &str) -> std::collections::BTreeMap<String, BTreeSet<String>> {
    let mut out = std::collections::BTreeMap::new();
    for line in page.lines().filter(|l| l.starts_with("| `kshim_")) {
        let cells: Vec<&str> = line.split('|').collect();
        let labels: BTreeSet<String> = cells
            .get(2)
            .map(|c| backticked(c).into_iter().map(str::to_owned).collect())
            .unwrap_or_default();
        for name in backticked(cells[1]) {
            out.insert(name.to_owned(), labels.clone());
        }
    }
    out
}

#[test]
fn the_dashboard_queries_only_series_kshim_serves_by_labels_they_have() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy/grafana/kshim-dashboard.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let served = served_series();
    let labels = documented_labels(&page("metrics.md"));
    let series = regex::Regex::new(r"\bkshim_[a-z_]+").unwrap();
    let grouping =
        regex::Regex::new(r"\bby \(([^)]*)\)\s*\(([^()]*(?:\([^()]*\))?[^()]*)\)").unwrap();
    let mut problems = Vec::new();
    let mut queries = 0;
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            queries += 1;
            for name in series.find_iter(expr).map(|m| m.as_str()) {
                let base = ["_bucket", "_count", "_sum"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix).filter(|b| served.contains(*b)))
                    .unwrap_or(name);
                if !served.contains(base) {
                    problems.push(format!(
                        "{}: {name} is not a series /metrics serves",
                        panel["title"]
                    ));
                }
            }
            for group in grouping.captures_iter(expr) {
                let inner = &group[2];
                let Some(name) = series.find(inner).map(|m| m.as_str()) else {
                    continue;
                };
                let base = name.strip_suffix("_bucket").unwrap_or(name);
                let known = labels.get(base).cloned().unwrap_or_default();
                for label in group[1].split(',').map(str::trim) {
                    let scraped = ["instance", "job"].contains(&label);
                    let histogram = label == "le" && name.ends_with("_bucket");
                    if !scraped && !histogram && !known.contains(label) {
                        problems.push(format!(
                            "{}: {base} has no label {label} (metrics.md gives {known:?})",
                            panel["title"]
                        ));
                    }
                }
            }
        }
    }
    assert!(queries >= 10, "only {queries} queries in the dashboard");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
