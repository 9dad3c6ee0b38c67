//! Who may call the API, and what for: the bearer tokens `serve` is started with and their
//! scopes. The restore token (`--token-env`) may do everything; the read token
//! (`--read-token-env`), for dashboards and scrapers, may only read (`GET`), so the
//! credential a Prometheus holds cannot start a restore that drops collections.
//!
//! Only the tokens' SHA-256 digests are kept. A presented token is hashed and its digest
//! compared with each kept one over all 32 bytes whatever they hold, so neither the time an
//! answer takes nor its content tells how much of a guess was right, or how long the token is.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest as _, Sha256};

use super::envelope::{Code, refused};
use crate::journal::TokenScope;

/// The shortest token `serve` accepts: 16 bytes (128 bits when random) is out of reach of
/// guessing over the network; a short one is a password someone chose.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Why `serve` refuses its tokens at start. A message names the flag and the variable,
/// never the token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("{flag} {var}: the variable is not set, or empty")]
    Unset { flag: &'static str, var: String },
    #[error(
        "{flag} {var}: the token is {len} bytes; at least {MIN_TOKEN_BYTES} are required \
         (make one with `openssl rand -hex 32`)"
    )]
    TooShort {
        flag: &'static str,
        var: String,
        len: usize,
    },
    #[error(
        "{flag} {var}: the token holds a space or a character that is not visible ASCII, \
         which an `Authorization: Bearer` header cannot carry"
    )]
    NotSendable { flag: &'static str, var: String },
    #[error(
        "--read-token-env {read} needs --token-env: without a restore token no route asks for \
         any token, and the read token would limit nothing"
    )]
    ReadWithoutRestore { read: String },
    #[error(
        "--read-token-env {read} holds the same token as --token-env {restore}: give the read \
         token a value of its own, or it can do everything the restore token can"
    )]
    SameToken { restore: String, read: String },
}

/// A token as `serve` was given it: the environment variable it came from (for messages)
/// and its value.
#[derive(Clone, Copy)]
pub struct GivenToken<'a> {
    pub var: &'a str,
    pub value: &'a str,
}

type TokenDigest = [u8; 32];

/// Which tokens a server has, for the OpenAPI document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSetup {
    /// None: a loopback server started without `--token-env`; no route asks for a token.
    None,
    /// The restore token alone.
    Restore,
    /// The restore token and a read token.
    RestoreAndRead,
}

/// The tokens a server accepts, as digests.
#[derive(Clone, Default)]
pub struct Tokens {
    restore: Option<TokenDigest>,
    read: Option<TokenDigest>,
}

/// Says which tokens there are, never their digests.
impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tokens({:?})", self.setup())
    }
}

const TOKEN_FLAG: &str = "--token-env";
const READ_TOKEN_FLAG: &str = "--read-token-env";

impl Tokens {
    /// A server that asks for no token (loopback only; the CLI refuses anything else).
    pub fn none() -> Tokens {
        Tokens::default()
    }

    /// The tokens held by the environment variables `--token-env` and `--read-token-env`
    /// name.
    pub fn from_env(
        restore_var: Option<&str>,
        read_var: Option<&str>,
    ) -> Result<Tokens, TokenError> {
        let restore = restore_var
            .map(|var| env_token(TOKEN_FLAG, var))
            .transpose()?;
        let read = read_var
            .map(|var| env_token(READ_TOKEN_FLAG, var))
            .transpose()?;
        Tokens::new(
            restore_var.zip(restore.as_deref()).map(given),
            read_var.zip(read.as_deref()).map(given),
        )
    }

    /// The restore token and, beside it, a read token.
    pub fn new(
        restore: Option<GivenToken<'_>>,
        read: Option<GivenToken<'_>>,
    ) -> Result<Tokens, TokenError> {
        let restore_digest = restore.map(|t| checked(TOKEN_FLAG, t)).transpose()?;
        let read_digest = read.map(|t| checked(READ_TOKEN_FLAG, t)).transpose()?;
        if let Some(read) = read {
            let Some(restore) = restore else {
                return Err(TokenError::ReadWithoutRestore {
                    read: read.var.to_owned(),
                });
            };
            if restore.value == read.value {
                return Err(TokenError::SameToken {
                    restore: restore.var.to_owned(),
                    read: read.var.to_owned(),
                });
            }
        }
        Ok(Tokens {
            restore: restore_digest,
            read: read_digest,
        })
    }

    /// Whether any route asks for a token.
    pub fn required(&self) -> bool {
        self.restore.is_some()
    }

    pub fn setup(&self) -> TokenSetup {
        match (self.restore, self.read) {
            (None, _) => TokenSetup::None,
            (Some(_), None) => TokenSetup::Restore,
            (Some(_), Some(_)) => TokenSetup::RestoreAndRead,
        }
    }

    /// The scope the request's `Authorization` header gives it; `None` when this server
    /// asks for a token and the header has none of its tokens.
    fn scope_of(&self, headers: &HeaderMap) -> Option<TokenScope> {
        let Some(restore) = &self.restore else {
            return Some(TokenScope::None);
        };
        let digest: TokenDigest = Sha256::digest(bearer(headers)?.as_bytes()).into();
        // Both compared, whichever matches, so the time taken says nothing of which.
        let is_restore = same_digest(&digest, restore);
        let is_read = self.read.is_some_and(|read| same_digest(&digest, &read));
        match (is_restore, is_read) {
            (true, _) => Some(TokenScope::Restore),
            (false, true) => Some(TokenScope::Read),
            (false, false) => None,
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header. The scheme's name is matched
/// without regard to case, as RFC 7235 has it for every authentication scheme.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim_start_matches(' ');
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn given<'a>((var, value): (&'a str, &'a str)) -> GivenToken<'a> {
    GivenToken { var, value }
}

/// The token in the environment variable `var`, which `flag` named.
fn env_token(flag: &'static str, var: &str) -> Result<String, TokenError> {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| TokenError::Unset {
            flag,
            var: var.to_owned(),
        })
}

/// `token`'s digest, once it is long enough and can be sent in a header.
fn checked(flag: &'static str, token: GivenToken<'_>) -> Result<TokenDigest, TokenError> {
    let var = || token.var.to_owned();
    if !token.value.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(TokenError::NotSendable { flag, var: var() });
    }
    if token.value.len() < MIN_TOKEN_BYTES {
        return Err(TokenError::TooShort {
            flag,
            var: var(),
            len: token.value.len(),
        });
    }
    Ok(Sha256::digest(token.value.as_bytes()).into())
}

/// Compares two digests over all their bytes, whatever they hold.
fn same_digest(a: &TokenDigest, b: &TokenDigest) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The bearer token check of every route but the probes (`/healthz`, `/readyz`) and the page: 401 without one of
/// this server's tokens. The scope found goes into the request's extensions, where
/// [`restore_scope_only`] and the restore handler (which records it) read it.
pub(super) async fn authorize(
    State(tokens): State<Arc<Tokens>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(scope) = tokens.scope_of(request.headers()) else {
        let mut answer = refused(
            StatusCode::UNAUTHORIZED,
            Code::NoPermission,
            request.headers(),
            "missing or wrong bearer token (Authorization: Bearer <token>)".into(),
        );
        answer
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return answer;
    };
    request.extensions_mut().insert(scope);
    next.run(request).await
}

/// Refuses (403) the read token on a route that changes something. A request
/// [`authorize`] did not see has no scope, and is refused too.
pub(super) async fn restore_scope_only(request: Request, next: Next) -> Response {
    if let Some(TokenScope::Restore | TokenScope::None) = request.extensions().get() {
        return next.run(request).await;
    }
    let msg = format!(
        "this is the read token: it may only read (GET); {} {} needs the restore token \
         (the one --token-env names)",
        request.method(),
        request.uri().path()
    );
    tracing::warn!(method = %request.method(), path = request.uri().path(), "refused: the read token on a route that changes something");
    refused(
        StatusCode::FORBIDDEN,
        Code::NoPermission,
        request.headers(),
        msg,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESTORE: &str = "restore-token-0123456789";
    const READ: &str = "read-token-0123456789abc";

    fn tokens(read: Option<&str>) -> Tokens {
        Tokens::new(
            Some(GivenToken {
                var: "R",
                value: RESTORE,
            }),
            read.map(|value| GivenToken { var: "RO", value }),
        )
        .unwrap()
    }

    fn with(authorization: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, authorization.parse().unwrap());
        headers
    }

    #[test]
    fn each_token_gives_its_scope_and_the_scheme_is_matched_in_any_case() {
        let t = tokens(Some(READ));
        for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
            assert_eq!(
                t.scope_of(&with(&format!("{scheme} {RESTORE}"))),
                Some(TokenScope::Restore),
                "{scheme}"
            );
        }
        assert_eq!(
            t.scope_of(&with(&format!("Bearer {READ}"))),
            Some(TokenScope::Read)
        );
        for wrong in [
            format!("Bearer {RESTORE}x"),
            format!("Bearer {}", &RESTORE[..RESTORE.len() - 1]),
            format!("Basic {RESTORE}"),
            format!("Bearer{RESTORE}"),
            "Bearer ".to_owned(),
        ] {
            assert_eq!(t.scope_of(&with(&wrong)), None, "{wrong}");
        }
        assert_eq!(t.scope_of(&HeaderMap::new()), None);
        assert_eq!(
            tokens(None).scope_of(&with(&format!("Bearer {READ}"))),
            None
        );
        assert_eq!(
            Tokens::none().scope_of(&HeaderMap::new()),
            Some(TokenScope::None)
        );
    }

    #[test]
    fn a_short_unsendable_lone_or_shared_read_token_is_refused_by_its_variable() {
        let given = |var, value| Some(GivenToken { var, value });
        let short = Tokens::new(given("API_TOKEN", "fifteen-bytes!!"), None).unwrap_err();
        let text = short.to_string();
        assert!(
            text.contains("--token-env API_TOKEN") && text.contains("at least 16"),
            "{text}"
        );
        assert!(
            !text.contains("fifteen-bytes"),
            "the token is never shown: {text}"
        );
        assert!(Tokens::new(given("A", "sixteen-bytes!!!"), None).is_ok());
        let read_short = Tokens::new(given("A", RESTORE), given("RO", "x")).unwrap_err();
        assert!(
            read_short.to_string().contains("--read-token-env RO"),
            "{read_short}"
        );
        let spaced = Tokens::new(given("A", "a token with spaces in it"), None).unwrap_err();
        assert!(matches!(spaced, TokenError::NotSendable { .. }), "{spaced}");
        let lone = Tokens::new(None, given("RO", READ)).unwrap_err();
        assert!(
            matches!(lone, TokenError::ReadWithoutRestore { .. }),
            "{lone}"
        );
        let same = Tokens::new(given("A", RESTORE), given("RO", RESTORE)).unwrap_err();
        assert!(matches!(same, TokenError::SameToken { .. }), "{same}");
    }
}
