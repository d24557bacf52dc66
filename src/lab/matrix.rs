//! `kshim lab matrix`: the cells of a release-by-feature matrix, the scenario
//! each one presents, why a failed cell failed, and the report in its three
//! forms (a table, JSON, Markdown). Running the cells is the CLI's
//! (`kshim lab matrix`); everything here is plain data.

use super::{MatchSpec, PinnedFeatures, ScenarioSpec};
use crate::features::kafka::KafkaRelease;
use crate::protocol::api_name;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A feature axis: `group.version=0,1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Axis {
    pub feature: String,
    pub levels: Vec<i16>,
}

impl Axis {
    pub fn parse(text: &str) -> Result<Axis, String> {
        let bad =
            || format!("\"{text}\": expected NAME=LEVEL[,LEVEL...], such as group.version=0,1");
        let (feature, levels) = text.split_once('=').ok_or_else(bad)?;
        let levels: Vec<i16> = levels
            .split(',')
            .map(|l| l.trim().parse::<i16>().ok().filter(|l| *l >= 0))
            .collect::<Option<_>>()
            .ok_or_else(bad)?;
        if feature.trim().is_empty() || levels.is_empty() {
            return Err(bad());
        }
        Ok(Axis {
            feature: feature.trim().to_owned(),
            levels,
        })
    }
}

/// One cell: a release and a level for each feature axis.
#[derive(Debug, Clone)]
pub struct Cell {
    pub release: KafkaRelease,
    pub levels: Vec<(String, i16)>,
}

/// Every combination of the releases and the axes' levels, releases outermost.
pub fn cells(releases: &[KafkaRelease], axes: &[Axis]) -> Vec<Cell> {
    let mut out: Vec<Cell> = releases
        .iter()
        .map(|&release| Cell {
            release,
            levels: Vec::new(),
        })
        .collect();
    for axis in axes {
        out = out
            .into_iter()
            .flat_map(|cell| {
                axis.levels.iter().map(move |&level| {
                    let mut next = cell.clone();
                    next.levels.push((axis.feature.clone(), level));
                    next
                })
            })
            .collect();
    }
    out
}

impl Cell {
    /// "4.1 group.version=0".
    pub fn label(&self) -> String {
        let mut out = self.release.minor().to_owned();
        for (feature, level) in &self.levels {
            let _ = write!(out, " {feature}={level}");
        }
        out
    }

    /// The label as a name for topics, groups and files: "4.1-group.version-0".
    pub fn slug(&self) -> String {
        self.label()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect()
    }

    /// Why the cell cannot be presented: a level its release does not support
    /// (a broker of that release cannot be formatted at it).
    pub fn unsupported(&self) -> Option<String> {
        let supported = self.release.supported_features();
        for (feature, level) in &self.levels {
            let max = supported.get(feature).map_or(0, |r| r.max);
            if *level > max {
                return Some(match supported.get(feature) {
                    Some(r) => format!(
                        "Kafka {} supports {feature} {}-{} only",
                        self.release.minor(),
                        r.min,
                        r.max
                    ),
                    None => format!("Kafka {} has no {feature}", self.release.minor()),
                });
            }
        }
        None
    }

    /// The discovery-lab scenario that presents the cell to every connection.
    pub fn scenario(&self) -> ScenarioSpec {
        ScenarioSpec {
            name: "matrix-cell".to_owned(),
            matches: MatchSpec::default(),
            features: (!self.levels.is_empty()).then(|| PinnedFeatures {
                epoch: None,
                levels: Some(self.levels.iter().cloned().collect()),
                min_zero_filter: true,
                replace: false,
            }),
            tagged_fields: Vec::new(),
            api_versions: BTreeMap::new(),
            errors: Vec::new(),
            delays: Vec::new(),
            release: Some(self.release.minor().to_owned()),
        }
    }
}

/// What became of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    /// Not run: its release cannot have its levels.
    Skip,
}

/// A cell's run, as every report form shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub cell: String,
    pub release: String,
    pub features: BTreeMap<String, i16>,
    pub verdict: Verdict,
    /// What `--expect` says (pass when it says nothing).
    pub expected: Verdict,
    /// The command's exit status; `None` when it was killed or not run.
    pub exit_status: Option<i32>,
    pub timed_out: bool,
    pub seconds: f64,
    /// One line: why it failed (or was skipped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// The last lines of the command's output (stdout and stderr together).
    pub output_tail: Vec<String>,
    /// From the census: the client software seen, the API versions used, the
    /// features each client was last served, and refusals.
    pub clients: Vec<String>,
    pub apis: BTreeMap<String, Vec<i16>>,
    pub served: BTreeMap<String, i16>,
    pub refusals: BTreeMap<String, u64>,
}

impl Outcome {
    pub fn as_expected(&self) -> bool {
        self.verdict == Verdict::Skip || self.verdict == self.expected
    }
}

/// Why a failed cell failed, in one line: kshim's own refusal when it gave
/// one, else an API the command's output names that the presented release
/// does not offer, else the last line that reads as an error.
pub fn why_failed(
    cell: &Cell,
    timed_out: Option<u64>,
    exit_status: Option<i32>,
    refusals: &BTreeMap<String, u64>,
    tail: &[String],
) -> String {
    if let Some(refusal) = refusals.keys().find(|r| r.contains("as presented")) {
        return refusal.clone();
    }
    // The APIs the newest release's brokers serve and this cell's do not.
    let offered = cell.release.data().broker_apis();
    let missing: Vec<String> = crate::releases::newest()
        .broker_apis()
        .iter()
        .filter(|newest| !offered.iter().any(|a| a.0 == newest.0))
        .map(|a| api_name(a.0))
        .collect();
    for line in tail.iter().rev() {
        for name in &missing {
            if line.contains(name.as_str()) || line.contains(&upper_snake(name)) {
                return format!(
                    "{name} not offered by Kafka {} as presented",
                    cell.release.minor()
                );
            }
        }
    }
    if let Some(seconds) = timed_out {
        return format!("timed out after {seconds} s");
    }
    let error = tail.iter().rev().find(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("exception") || l.contains("error")
    });
    match (error, exit_status) {
        (Some(line), _) => clip(line.trim(), 160),
        (None, Some(code)) => format!("exit status {code}"),
        (None, None) => "killed by a signal".to_owned(),
    }
}

/// "ShareGroupHeartbeat" -> "SHARE_GROUP_HEARTBEAT", as Java clients name APIs.
fn upper_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// `--expect` lines: a cell (its label, or a release alone for every cell of
/// that release) and `pass` or `fail`; `#` starts a comment.
pub fn parse_expectations(text: &str) -> Result<Vec<(String, Verdict)>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (cell, verdict) = line
            .rsplit_once(char::is_whitespace)
            .ok_or_else(|| format!("line {}: expected \"CELL pass\" or \"CELL fail\"", n + 1))?;
        let verdict = match verdict {
            "pass" => Verdict::Pass,
            "fail" => Verdict::Fail,
            other => {
                return Err(format!(
                    "line {}: \"{other}\" is neither pass nor fail",
                    n + 1
                ))
            }
        };
        out.push((
            cell.split_whitespace().collect::<Vec<_>>().join(" "),
            verdict,
        ));
    }
    Ok(out)
}

/// What the expectations say of `cell`: its own line, else its release's,
/// else pass.
pub fn expected(expectations: &[(String, Verdict)], cell: &Cell) -> Verdict {
    let label = cell.label();
    let find = |key: &str| expectations.iter().find(|(c, _)| c == key).map(|e| e.1);
    find(&label)
        .or_else(|| find(cell.release.minor()))
        .unwrap_or(Verdict::Pass)
}

fn mark(o: &Outcome) -> &'static str {
    match (o.verdict, o.as_expected()) {
        (Verdict::Skip, _) => "skip",
        (Verdict::Pass, true) => "pass",
        (Verdict::Fail, true) => "fail (expected)",
        (Verdict::Pass, false) => "PASS (expected fail)",
        (Verdict::Fail, false) => "FAIL",
    }
}

/// One line: how many cells passed, failed, were skipped and surprised.
pub fn summary(outcomes: &[Outcome]) -> String {
    let count = |v: Verdict| outcomes.iter().filter(|o| o.verdict == v).count();
    let surprises = outcomes.iter().filter(|o| !o.as_expected()).count();
    format!(
        "{} cells: {} passed, {} failed, {} skipped; {}",
        outcomes.len(),
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Skip),
        match surprises {
            0 => "every cell as expected".to_owned(),
            n => format!("{n} not as expected"),
        }
    )
}

/// The table for a terminal: one row per cell, then the output of each
/// cell that did not go as expected.
pub fn table(outcomes: &[Outcome]) -> String {
    let width = |f: fn(&Outcome) -> String, title: &str| {
        outcomes
            .iter()
            .map(|o| f(o).len())
            .max()
            .unwrap_or(0)
            .max(title.len())
    };
    let cell_w = width(|o| o.cell.clone(), "CELL");
    let mark_w = width(|o| mark(o).to_owned(), "RESULT");
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:cell_w$}  {:mark_w$}  {:>6}  WHY",
        "CELL", "RESULT", "TIME"
    );
    for o in outcomes {
        let _ = writeln!(
            out,
            "{:cell_w$}  {:mark_w$}  {:>5.1}s  {}",
            o.cell,
            mark(o),
            o.seconds,
            o.why.as_deref().unwrap_or("")
        );
    }
    for o in outcomes.iter().filter(|o| !o.as_expected()) {
        let _ = writeln!(
            out,
            "\n--- {} ({}): the last lines of its output",
            o.cell,
            mark(o)
        );
        for line in &o.output_tail {
            let _ = writeln!(out, "  {line}");
        }
    }
    let _ = writeln!(out, "\n{}", summary(outcomes));
    out
}

/// The table as Markdown, for CI summaries: a column per feature axis and the
/// client software and API versions the census saw.
pub fn markdown(outcomes: &[Outcome]) -> String {
    let features: Vec<&String> = outcomes
        .first()
        .map(|o| o.features.keys().collect())
        .unwrap_or_default();
    let mut out = String::from("| Release |");
    for f in &features {
        let _ = write!(out, " `{f}` |");
    }
    out.push_str(" Result | Time | Why | Clients |\n|---|");
    for _ in &features {
        out.push_str("---:|");
    }
    out.push_str("---|---:|---|---|\n");
    for o in outcomes {
        let _ = write!(out, "| {} |", o.release);
        for f in &features {
            let _ = write!(out, " {} |", o.features.get(*f).copied().unwrap_or(0));
        }
        let _ = writeln!(
            out,
            " {} | {:.1} s | {} | {} |",
            mark(o),
            o.seconds,
            o.why.as_deref().unwrap_or("").replace('|', "\\|"),
            o.clients.join(", ")
        );
    }
    let _ = writeln!(out, "\n{}", summary(outcomes));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(name: &str) -> KafkaRelease {
        KafkaRelease::named(name).unwrap()
    }

    #[test]
    fn cells_are_every_combination_releases_outermost() {
        let axes = [
            Axis::parse("group.version=0,1").unwrap(),
            Axis::parse("share.version=1").unwrap(),
        ];
        let cells = cells(&[release("4.0"), release("4.4")], &axes);
        let labels: Vec<String> = cells.iter().map(Cell::label).collect();
        assert_eq!(
            labels,
            [
                "4.0 group.version=0 share.version=1",
                "4.0 group.version=1 share.version=1",
                "4.4 group.version=0 share.version=1",
                "4.4 group.version=1 share.version=1",
            ]
        );
        assert_eq!(cells[0].slug(), "4.0-group.version-0-share.version-1");
        // Kafka 4.0 has no share.version to finalize; 4.4 has.
        assert!(cells[0].unsupported().unwrap().contains("share.version"));
        assert!(cells[2].unsupported().is_none());
        assert!(Axis::parse("group.version").is_err());
        assert!(Axis::parse("group.version=one").is_err());
        assert!(Axis::parse("group.version=-1").is_err());
    }

    #[test]
    fn a_cells_scenario_presents_its_release_and_levels() {
        let cell = &cells(
            &[release("4.2")],
            &[Axis::parse("group.version=0").unwrap()],
        )[0];
        let scenario = super::super::Scenario::new(cell.scenario()).expect("valid");
        assert_eq!(scenario.spec().release.as_deref(), Some("4.2"));
        assert!(
            scenario.take_error(68).is_some(),
            "group.version 0 turns KIP-848 off"
        );
    }

    #[test]
    fn a_failed_cell_says_why_in_one_line() {
        let cell = &cells(&[release("4.0")], &[])[0];
        let none = BTreeMap::new();
        let tail = |lines: &[&str]| lines.iter().map(|l| (*l).to_owned()).collect::<Vec<_>>();
        let java = tail(&[
            "org.apache.kafka.common.errors.UnsupportedVersionException: The node does not support SHARE_GROUP_HEARTBEAT",
            "\tat Main.main(Main.java:3)",
        ]);
        assert_eq!(
            why_failed(cell, None, Some(1), &none, &java),
            "ShareGroupHeartbeat not offered by Kafka 4.0 as presented"
        );
        let refusals = BTreeMap::from([(
            "ConsumerGroupHeartbeat: UNSUPPORTED_VERSION (35, group.version 0 as presented (needs 1))".to_owned(),
            1,
        )]);
        assert!(
            why_failed(cell, None, Some(1), &refusals, &java).starts_with("ConsumerGroupHeartbeat")
        );
        assert_eq!(
            why_failed(cell, Some(60), None, &none, &[]),
            "timed out after 60 s"
        );
        assert_eq!(
            why_failed(
                cell,
                None,
                Some(3),
                &none,
                &tail(&["KafkaError: _TRANSPORT", "bye"])
            ),
            "KafkaError: _TRANSPORT"
        );
        assert_eq!(
            why_failed(cell, None, Some(3), &none, &tail(&["bye"])),
            "exit status 3"
        );
    }

    #[test]
    fn expectations_name_a_cell_or_a_whole_release() {
        let e =
            parse_expectations("# share groups\n4.0 fail\n4.1  group.version=0 fail\n4.4 pass\n")
                .unwrap();
        let cells = cells(
            &[release("4.0"), release("4.1"), release("4.2")],
            &[Axis::parse("group.version=0,1").unwrap()],
        );
        let verdicts: Vec<Verdict> = cells.iter().map(|c| expected(&e, c)).collect();
        use Verdict::*;
        assert_eq!(verdicts, [Fail, Fail, Fail, Pass, Pass, Pass]);
        assert!(parse_expectations("4.0 maybe")
            .unwrap_err()
            .contains("neither pass nor fail"));
        assert!(parse_expectations("4.0").is_err());
    }
}
