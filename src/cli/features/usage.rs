//! Command-line mistakes of `kshim features`, worded as kafka-features.sh words
//! them.

/// A mistake on the command line, reported in kafka-features.sh's words (its
/// argparse4j parser's): `Command line error: MESSAGE. Type --help for help.`
/// on stderr without a final newline, exit status 1.
#[derive(Debug)]
pub struct CommandLineError(pub String);

impl std::fmt::Display for CommandLineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // As Kafka's tool, which adds ". Type" even after a message that ends
        // with a period ("...--bootstrap-server.. Type --help for help."): the
        // compatibility tests hold kshim to its exact text, and scripts match it.
        write!(f, "Command line error: {}. Type --help for help.", self.0)
    }
}

impl std::error::Error for CommandLineError {}

/// kafka-features.sh's subcommands, in the order it lists them.
const SUBCOMMANDS: [&str; 6] = [
    "describe",
    "upgrade",
    "downgrade",
    "disable",
    "version-mapping",
    "feature-dependencies",
];

/// clap's refusal of `kshim features ARGS` in kafka-features.sh's words; `None`
/// for help and version output and for mistakes its parser words otherwise
/// (such as a value outside kshim's own `--output` choices).
pub fn command_line_error(e: &clap::Error) -> Option<CommandLineError> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let get = |kind| match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(v)) => v.first().cloned(),
        _ => None,
    };
    // clap names an option with its value's placeholder: "--feature <FEATURE>".
    let option = |kind| get(kind).and_then(|a| a.split_whitespace().next().map(str::to_owned));
    let message = match e.kind() {
        ErrorKind::InvalidSubcommand => format!(
            "invalid choice: '{}' (choose from {})",
            get(ContextKind::InvalidSubcommand)?,
            SUBCOMMANDS.map(|s| format!("'{s}'")).join(", ")
        ),
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            "too few arguments".to_owned()
        }
        ErrorKind::UnknownArgument => {
            format!(
                "unrecognized arguments: '{}'",
                get(ContextKind::InvalidArg)?
            )
        }
        ErrorKind::InvalidValue if get(ContextKind::InvalidValue)?.is_empty() => format!(
            "argument {}: expected one argument",
            option(ContextKind::InvalidArg)?
        ),
        // Every option clap validates here takes an integer (--node-id, --timeout).
        ErrorKind::ValueValidation => {
            let value = get(ContextKind::InvalidValue)?;
            format!(
                "argument {}: could not convert '{value}' to Integer (For input string: \"{value}\")",
                option(ContextKind::InvalidArg)?
            )
        }
        ErrorKind::MissingRequiredArgument => {
            format!("argument {} is required", option(ContextKind::InvalidArg)?)
        }
        // clap names the option given first as the invalid one; Kafka's tool
        // refuses the one given second.
        ErrorKind::ArgumentConflict => format!(
            "argument {}: not allowed with argument {}",
            option(ContextKind::PriorArg)?,
            option(ContextKind::InvalidArg)?
        ),
        _ => return None,
    };
    Some(CommandLineError(message))
}

#[cfg(test)]
mod message_tests {
    use super::CommandLineError;

    /// kafka-features.sh 4.4 prints "...--bootstrap-server.. Type --help for
    /// help." for a missing server: the doubled period is Kafka's, kept.
    #[test]
    fn messages_are_worded_as_kafka_features_words_them() {
        assert_eq!(
            CommandLineError("You must specify either --bootstrap-controller or --bootstrap-server.".into())
                .to_string(),
            "Command line error: You must specify either --bootstrap-controller or --bootstrap-server.. Type --help for help."
        );
    }
}
