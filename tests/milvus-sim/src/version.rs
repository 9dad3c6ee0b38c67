//! The version string a cluster reports, and the features that depend on it.
//!
//! Milvus reports `3.0.0` or `2.6.24` for release builds, `v2.5.4` for old `git describe`
//! builds and `master-20260806-1a2b3c4` for branch builds (docs/milvus-facts.md §4.2).

/// A cluster's reported version, parsed once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerVersion {
    /// A release: the numbers of `major.minor.patch`, a leading `v` and a `-suffix` dropped.
    Release { major: u64, minor: u64, patch: u64 },
    /// A branch build such as `master-20260806-1a2b3c4`: newer than any release it forked from.
    Branch,
}

/// Which import API a Milvus of this version serves (docs/milvus-facts.md §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportFace {
    /// Before 2.4: the v1 gRPC `Import` alone; `/v2/vectordb/jobs/import/*` answers HTTP 404.
    V1Only,
    /// 2.4 to 2.6: REST v2 import without two-phase: no commit or abort route, no Uncommitted
    /// state, and an `auto_commit` option is an option it does not know (ignored).
    RestAutoCommit,
    /// 3.0 and newer, and branch builds: two-phase import.
    TwoPhase,
}

impl ServerVersion {
    pub fn import_face(&self) -> ImportFace {
        match *self {
            ServerVersion::Branch => ImportFace::TwoPhase,
            ServerVersion::Release { major, minor, .. } => match (major, minor) {
                (0..=1, _) | (2, 0..=3) => ImportFace::V1Only,
                (2, _) => ImportFace::RestAutoCommit,
                _ => ImportFace::TwoPhase,
            },
        }
    }

    /// Whether CreateCollection's `preserve_field_ids` property keeps the schema's field ids
    /// (Milvus 3.0's rootcoord; its snapshot restore sets it). Older servers number the
    /// fields themselves whatever the schema says.
    pub fn preserves_field_ids(&self) -> bool {
        self.import_face() == ImportFace::TwoPhase
    }

    pub fn parse(raw: &str) -> Self {
        let stripped = raw.strip_prefix('v').unwrap_or(raw);
        let core = stripped.split(['-', '+']).next().unwrap_or(stripped);
        let mut parts = core.split('.').map(str::parse::<u64>);
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(Ok(major)), Some(Ok(minor)), Some(Ok(patch)), None) => ServerVersion::Release {
                major,
                minor,
                patch,
            },
            _ => ServerVersion::Branch,
        }
    }

    /// `dataCoord.import.taskRetention`'s default: 48 h where the idempotent-import work
    /// landed (3.0.2, 2.6.24), 3 h before (docs/milvus-facts.md §2.6).
    pub fn default_task_retention(&self) -> std::time::Duration {
        let hours = if self.honours_idempotency_key() {
            48
        } else {
            3
        };
        std::time::Duration::from_secs(hours * 3600)
    }

    /// Whether `Idempotency-Key` on import create is honoured: Milvus ≥ 3.0.2, or a 2.6 release
    /// from 2.6.24 on, or a branch build; older servers ignore the header (idempotent-import doc).
    pub fn honours_idempotency_key(&self) -> bool {
        match *self {
            ServerVersion::Branch => true,
            ServerVersion::Release {
                major,
                minor,
                patch,
            } => (major, minor, patch) >= (3, 0, 2) || (major == 2 && minor == 6 && patch >= 24),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_import_api_follows_the_version() {
        for (v, face) in [
            ("v2.3.5-lite", ImportFace::V1Only),
            ("2.3.21", ImportFace::V1Only),
            ("v2.4.0", ImportFace::RestAutoCommit),
            ("2.6.24", ImportFace::RestAutoCommit),
            ("3.0.0", ImportFace::TwoPhase),
            ("master-20260806-1a2b3c4", ImportFace::TwoPhase),
        ] {
            assert_eq!(ServerVersion::parse(v).import_face(), face, "{v}");
        }
    }

    #[test]
    fn idempotency_key_by_version() {
        for honoured in [
            "3.0.2",
            "3.1.0",
            "2.6.24",
            "2.6.30",
            "master-20260806-1a2b3c4",
            "4.0.0-beta",
        ] {
            assert!(
                ServerVersion::parse(honoured).honours_idempotency_key(),
                "{honoured}"
            );
        }
        for ignored in ["3.0.0", "3.0.1", "2.6.23", "v2.5.4", "2.5.30"] {
            assert!(
                !ServerVersion::parse(ignored).honours_idempotency_key(),
                "{ignored}"
            );
        }
    }
}
