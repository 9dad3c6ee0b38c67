//! Credentials and where they are read from (a token's variable, or a value a milvus-backup
//! config wrote), below everything else in `config` so that both host config readers and the
//! validation of jobs stand on it.

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

/// Where a cluster's token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable, read when the token is needed (`token_env`).
    Env(String),
    /// A milvus-backup config's `milvus.user` and `milvus.password`, as `user:password`.
    Given(Secret),
}

impl TokenSource {
    /// The token, reading the environment through `env` for [`TokenSource::Env`].
    pub fn read(&self, env: Env<'_>) -> Result<Secret, MissingToken> {
        match self {
            TokenSource::Env(var) => env(var)
                .map(Secret)
                .ok_or_else(|| MissingToken(var.clone())),
            TokenSource::Given(secret) => Ok(secret.clone()),
        }
    }
}

/// A token's environment variable is not set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("environment variable {0} is not set")]
pub struct MissingToken(pub String);
