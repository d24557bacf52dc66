//! `kshim features upgrade`, `downgrade` and `disable`: the UpdateFeatures
//! requests and their report, as kafka-features.sh words it.

use super::*;

/// Asks on the terminal before lowering levels; refuses when there is no terminal
/// to ask on and `--yes` was not given.
fn confirm(kind: Kind, wanted: &BTreeMap<String, i16>, current: &Described) -> Result<()> {
    let mut lines = String::new();
    for (i, (name, level)) in wanted.iter().enumerate() {
        let existing = current
            .answer
            .features
            .finalized
            .get(name)
            .map_or(0, |&(_, m)| m);
        lines.push_str(&format!(
            "{}. {name} from {} (existing) to {} (new)\n",
            i + 1,
            level_to_string(name, existing),
            level_to_string(name, *level)
        ));
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "refusing to {} without confirmation: no terminal to ask on; pass --yes to proceed",
            kind.op()
        );
    }
    eprint!(
        "Please confirm before {}ing the following features:\n{lines}[y/N]? ",
        kind.op().trim_end_matches('e')
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES") {
        Ok(())
    } else {
        bail!("{} cancelled", kind.op())
    }
}

pub(super) async fn update_features(
    kind: Kind,
    upgrade_type: UpgradeType,
    wanted: BTreeMap<String, i16>,
    args: &UpdateArgs,
    target: &Target,
) -> Result<u8> {
    if wanted.is_empty() {
        bail!("You must specify at least one feature to {}", kind.op());
    }
    if kind == Kind::Upgrade {
        if let Some((name, level)) = wanted.iter().find(|(_, &l)| l < 1) {
            bail!("Can not upgrade {name} to {level}: use downgrade or disable to lower a level.");
        }
    }
    let timeout = target.timeout;
    let current = describe_all(target).await?;
    if kind != Kind::Upgrade && !args.dry_run && !args.yes {
        confirm(kind, &wanted, &current)?;
    }

    // The update goes to the server that answered describe; Kafka brokers forward
    // it to their controller.
    let server = format!("{}:{}", current.host, current.port);
    let mut client = target.connect(&server).await?;
    let (_, answer) = client.api_versions().await?;
    let version = negotiate(&answer.apis, ApiKey::UpdateFeatures, 2)
        .with_context(|| format!("{server} does not support UpdateFeatures"))?;
    if args.dry_run && version == 0 {
        bail!("{server} supports only UpdateFeatures v0, which has no validate-only mode");
    }
    // Kafka's features and the others in separate requests: in front of a Kafka
    // cluster they have different owners, and kshim refuses a request that mixes
    // them. Each request is validated (or applied) as a whole, as Kafka does.
    let (kafka, own): (BTreeMap<_, _>, BTreeMap<_, _>) = wanted
        .iter()
        .partition(|(name, _)| kshim::features::kafka::is_kafka_feature(name));
    let mut outcome: BTreeMap<&String, Option<String>> = BTreeMap::new();
    for batch in [kafka, own].into_iter().filter(|b| !b.is_empty()) {
        let mut request =
            UpdateFeaturesRequest::default().with_timeout_ms((timeout.as_millis() as i32).max(1));
        request.validate_only = args.dry_run;
        for (name, level) in &batch {
            let mut key = FeatureUpdateKey::default()
                .with_feature(StrBytes::from_string((*name).clone()))
                .with_max_version_level(**level);
            if version == 0 {
                key.allow_downgrade = upgrade_type != UpgradeType::Upgrade;
            } else {
                key.upgrade_type = upgrade_type.code();
            }
            request.feature_updates.push(key);
        }
        let response = client.update_features(version, &request).await?;
        // Kafka's Admin client gives every feature the top-level error when there
        // is one, and otherwise each feature its own result.
        for name in batch.keys() {
            let error = if response.error_code != errors::NONE {
                Some(message_or_name(
                    response.error_code,
                    response.error_message.as_deref(),
                ))
            } else {
                response
                    .results
                    .iter()
                    .find(|(f, _, _)| f == *name)
                    .filter(|(_, code, _)| *code != errors::NONE)
                    .map(|(_, code, msg)| message_or_name(*code, msg.as_deref()))
            };
            outcome.insert(name, error);
        }
    }

    let failures = outcome.values().filter(|e| e.is_some()).count();
    let mut lines = Vec::new();
    for (name, error) in &outcome {
        let level = wanted[*name];
        lines.push(match error {
            Some(message) => {
                let helper = if args.dry_run { "Can not" } else { "Could not" };
                let what = match kind {
                    Kind::Disable => format!("disable {name}"),
                    _ => format!("{} {name} to {level}", kind.op()),
                };
                format!("{helper} {what}. {message}")
            }
            None => {
                let verb = if args.dry_run { "can be" } else { "was" };
                let what = match kind {
                    Kind::Disable => "disabled.".to_owned(),
                    _ => format!("{}d to {level}.", kind.op()),
                };
                format!("{name} {verb} {what}")
            }
        });
    }
    match target.output {
        Output::Text => {
            emit(&lines.iter().map(|l| format!("{l}\n")).collect::<String>());
        }
        Output::Json => {
            let after = describe_all(target).await?;
            let mut doc = describe_json(&after, if failures == 0 { "OK" } else { "FAILED" });
            let results: Map<String, Value> = outcome
                .iter()
                .map(|(name, error)| {
                    let v = match error {
                        None => json!({"status": "OK", "level": wanted[*name]}),
                        Some(e) => json!({"status": "FAILED", "level": wanted[*name], "error": e}),
                    };
                    ((*name).clone(), v)
                })
                .collect();
            doc.insert("updates".into(), Value::Object(results));
            doc.insert("dry_run".into(), json!(args.dry_run));
            emit(&format!(
                "{}\n",
                serde_json::to_string_pretty(&Value::Object(doc))?
            ));
        }
    }
    if failures > 0 {
        eprintln!("{failures} out of {} operation(s) failed.", wanted.len());
        return Ok(1);
    }
    Ok(0)
}

fn message_or_name(code: i16, message: Option<&str>) -> String {
    match message {
        Some(m) if !m.is_empty() => m.to_owned(),
        _ => format!("{} (error code {code})", errors::name(code)),
    }
}
