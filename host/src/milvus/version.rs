//! Milvus version strings, as `GetVersion` reports them (docs/milvus-facts.md §4.2).
//!
//! Release builds report `3.0.0` or `2.6.24`, servers up to 2.5 report `git describe` tags such
//! as `v2.5.4`, and development builds report `<branch>-<YYYYMMDD>-<shortsha>`. A string that is
//! not semver is a branch build; branch builds carry the newest features, so they count as new.

use std::fmt;

/// A parsed server version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerVersion {
    /// A release: `major.minor.patch`, with any pre-release or build suffix dropped.
    Release {
        major: u64,
        minor: u64,
        patch: u64,
        raw: String,
    },
    /// A development build whose version string is not semver, e.g. `master-20260806-1a2b3c4`.
    Branch(String),
}

impl ServerVersion {
    /// Parses what `GetVersion` answered. Never fails: a string that is not a release is a branch.
    pub fn parse(raw: &str) -> ServerVersion {
        let trimmed = raw.trim();
        let body = trimmed.strip_prefix('v').unwrap_or(trimmed);
        // `3.0.0-beta` and `3.0.0+build` are still release 3.0.0 for feature checks.
        let core = body.split(['-', '+']).next().unwrap_or(body);
        let parts: Vec<&str> = core.split('.').collect();
        if let [major, minor, patch] = parts[..]
            && let (Ok(major), Ok(minor), Ok(patch)) = (
                major.parse::<u64>(),
                minor.parse::<u64>(),
                patch.parse::<u64>(),
            )
        {
            return ServerVersion::Release {
                major,
                minor,
                patch,
                raw: trimmed.to_string(),
            };
        }
        ServerVersion::Branch(trimmed.to_string())
    }

    /// Two-phase import with secondaries needs Milvus 3.0 or newer on every end.
    pub fn supports_two_phase_import(&self) -> bool {
        match self {
            ServerVersion::Release { major, .. } => *major >= 3,
            ServerVersion::Branch(_) => true,
        }
    }

    /// Whether an import with `l0_import=true` is taken with the server's default settings:
    /// from 2.4, which brought L0 segments, to 2.6. 2.3 has no L0 import; from 3.0,
    /// `dataCoord.import.enableL0Import` is off by default (#51194), as on branch builds.
    pub fn imports_l0_by_default(&self) -> bool {
        match self {
            ServerVersion::Release { major, minor, .. } => *major == 2 && *minor >= 4,
            ServerVersion::Branch(_) => false,
        }
    }

    /// `Idempotency-Key` on import create is honoured from 3.0.2 and, on the 2.6 line, 2.6.24;
    /// older servers ignore the header.
    pub fn honours_idempotency_key(&self) -> bool {
        match self {
            ServerVersion::Release {
                major,
                minor,
                patch,
                ..
            } => {
                (*major, *minor, *patch) >= (3, 0, 2)
                    || (*major == 2 && *minor == 6 && *patch >= 24)
            }
            ServerVersion::Branch(_) => true,
        }
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerVersion::Release { raw, .. } | ServerVersion::Branch(raw) => f.write_str(raw),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_strings_parse_with_or_without_v() {
        assert!(matches!(
            ServerVersion::parse("3.0.0"),
            ServerVersion::Release {
                major: 3,
                minor: 0,
                patch: 0,
                ..
            }
        ));
        assert!(matches!(
            ServerVersion::parse("v2.5.4"),
            ServerVersion::Release {
                major: 2,
                minor: 5,
                patch: 4,
                ..
            }
        ));
        assert!(matches!(
            ServerVersion::parse("3.0.0-beta"),
            ServerVersion::Release {
                major: 3,
                minor: 0,
                patch: 0,
                ..
            }
        ));
    }

    #[test]
    fn branch_builds_count_as_new() {
        let v = ServerVersion::parse("master-20260806-1a2b3c4");
        assert_eq!(v, ServerVersion::Branch("master-20260806-1a2b3c4".into()));
        assert!(v.supports_two_phase_import());
        assert!(v.honours_idempotency_key());
        // milvus-lite answers a name, not semver: it is not a release either.
        assert!(matches!(
            ServerVersion::parse("milvus_lite-3.2.2"),
            ServerVersion::Branch(_)
        ));
    }

    #[test]
    fn two_phase_needs_three_or_newer() {
        assert!(ServerVersion::parse("3.0.0").supports_two_phase_import());
        assert!(!ServerVersion::parse("2.6.24").supports_two_phase_import());
        assert!(!ServerVersion::parse("v2.5.4").supports_two_phase_import());
    }

    #[test]
    fn idempotency_key_versions() {
        assert!(!ServerVersion::parse("3.0.0").honours_idempotency_key());
        assert!(ServerVersion::parse("3.0.2").honours_idempotency_key());
        assert!(ServerVersion::parse("3.1.0").honours_idempotency_key());
        assert!(ServerVersion::parse("2.6.24").honours_idempotency_key());
        assert!(!ServerVersion::parse("2.6.23").honours_idempotency_key());
        assert!(!ServerVersion::parse("v2.5.4").honours_idempotency_key());
    }
}
