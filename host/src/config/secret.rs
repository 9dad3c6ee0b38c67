//! Credentials and where they are read from, below everything else in `config` so that both
//! host config readers and the validation of jobs stand on it.

use std::fmt;

/// A credential (a token, a key); never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(crate) String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// How validation reads environment variables; tests pass their own.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads a variable of this process's environment (validation's and `storage::open`'s).
pub(crate) fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
