//! A value that must not appear in logs or debug output: a password, a token,
//! a key's passphrase. The lowest layer: it imports nothing from the crate.

use std::fmt;

/// A value that must not appear in logs or debug output: a password or a token.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[hidden]")
    }
}
