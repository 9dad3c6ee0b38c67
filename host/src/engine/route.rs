//! Which import a restore drives, chosen once in preflight from what the job named and what
//! the target is: every Milvus from 2.3 on is restored into, each through the import it has.
//!
//! | target | import | commit |
//! |---|---|---|
//! | before 2.4 | v1 gRPC `Import`, one job per segment group (`per_seg`) | auto |
//! | 2.4 to 2.6 | REST v2 import, merged | auto |
//! | 3.0 and newer | REST v2 import, merged | two-phase, on the target alone or with its secondaries |
//!
//! A branch build's version says nothing of this, so it is probed: an import route the
//! server lacks answers HTTP 404.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::ends::EndClient;
use crate::backup::Strategy;
use crate::milvus::{MilvusJobId, ServerVersion};

/// How a restore's jobs reach the target and become visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// REST v2 import held Uncommitted on every end, then one commit (3.0+).
    TwoPhase,
    /// REST v2 import that commits itself (2.4 to 2.6).
    MergedAutoCommit,
    /// One v1 gRPC import per segment group, committing itself (`per_seg`).
    PerSeg,
}

impl Route {
    /// The strategy the plan's batches are cut for.
    pub fn strategy(self) -> Strategy {
        match self {
            Route::TwoPhase | Route::MergedAutoCommit => Strategy::Merged,
            Route::PerSeg => Strategy::PerSeg,
        }
    }

    /// Whether each job becomes visible on its own: nothing holds it back, so nothing
    /// can be rolled back once it imported.
    pub fn auto_commits(self) -> bool {
        !matches!(self, Route::TwoPhase)
    }
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Route::TwoPhase => "two-phase merged import",
            Route::MergedAutoCommit => "merged import, auto-commit",
            Route::PerSeg => "per_seg: v1 import per segment, auto-commit",
        })
    }
}

/// The job names `strategy = "merged"` and the target's import API is v1 alone.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "strategy \"merged\" needs REST v2 import, which Milvus {version} does not have \
     (2.4+); leave strategy unset or use per_seg"
)]
pub struct NoRoute {
    pub version: ServerVersion,
}

/// What a target's import API can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImportApi {
    /// Before 2.4: v1 gRPC `Import` only.
    V1Only,
    /// 2.4 to 2.6: REST v2 import, no commit or abort.
    RestAutoCommit,
    /// 3.0 and newer: REST v2 import with two-phase commit.
    TwoPhase,
}

impl ImportApi {
    /// From a release's version; `None` for a branch build, which must be probed.
    pub fn of(version: &ServerVersion) -> Option<ImportApi> {
        match version {
            ServerVersion::Branch(_) => None,
            ServerVersion::Release { major, minor, .. } => Some(match (*major, *minor) {
                (0..=1, _) | (2, 0..=3) => ImportApi::V1Only,
                (2, _) => ImportApi::RestAutoCommit,
                _ => ImportApi::TwoPhase,
            }),
        }
    }

    /// Asks the target which import routes it serves: `list` exists from 2.4, `commit` from
    /// 3.0 (its answer for a job that does not exist is an error envelope, not HTTP 404).
    pub async fn probe(target: &EndClient) -> Result<ImportApi, crate::milvus::Error> {
        match target.rest.list("", "").await {
            Err(e) if e.is_missing_route() => return Ok(ImportApi::V1Only),
            Err(e) => return Err(e),
            Ok(_) => {}
        }
        // No job has id 0: a server with the route says so in its envelope.
        match target.rest.commit("", &MilvusJobId("0".into())).await {
            Err(e) if e.is_missing_route() => Ok(ImportApi::RestAutoCommit),
            Ok(()) | Err(crate::milvus::Error::Api { .. }) => Ok(ImportApi::TwoPhase),
            Err(e) => Err(e),
        }
    }
}

/// Preflight's choice and why, for `plan` and the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Choice {
    pub route: Route,
    pub why: String,
}

/// The route for a job that named `named` (or nothing) on a target `version` whose import
/// API is `api`; `Err` is the refusal of a strategy the target cannot do, with what to do.
pub fn choose(
    named: Option<Strategy>,
    api: ImportApi,
    version: &ServerVersion,
    secondaries: usize,
) -> Result<Choice, NoRoute> {
    let two_phase_why = || match secondaries {
        0 => format!(
            "Milvus {version} has two-phase import: every job is held Uncommitted on the target \
             and committed once, so the restore is all or nothing"
        ),
        n => format!(
            "Milvus {version} has two-phase import: every job is held Uncommitted on the target \
             and its {n} secondaries, then committed once"
        ),
    };
    let choice = |route, why| Ok(Choice { route, why });
    match (named, api) {
        (Some(Strategy::PerSeg), _) => choice(
            Route::PerSeg,
            "strategy = \"per_seg\": one v1 import per segment, auto-committed".into(),
        ),
        (Some(Strategy::Merged), ImportApi::V1Only) => Err(NoRoute {
            version: version.clone(),
        }),
        (None, ImportApi::V1Only) => choice(
            Route::PerSeg,
            format!(
                "Milvus {version} has no REST v2 import (2.4+): one v1 import per segment, \
                 auto-committed"
            ),
        ),
        (_, ImportApi::RestAutoCommit) => choice(
            Route::MergedAutoCommit,
            format!(
                "Milvus {version} has REST v2 import without two-phase commit (3.0+): merged \
                 jobs, each committing itself"
            ),
        ),
        (_, ImportApi::TwoPhase) => choice(Route::TwoPhase, two_phase_why()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> ServerVersion {
        ServerVersion::parse(s)
    }

    #[test]
    fn the_api_follows_the_release_and_a_branch_build_is_probed() {
        assert_eq!(ImportApi::of(&v("v2.3.5-lite")), Some(ImportApi::V1Only));
        assert_eq!(ImportApi::of(&v("v2.4.0")), Some(ImportApi::RestAutoCommit));
        assert_eq!(ImportApi::of(&v("2.6.24")), Some(ImportApi::RestAutoCommit));
        assert_eq!(ImportApi::of(&v("3.0.0")), Some(ImportApi::TwoPhase));
        assert_eq!(ImportApi::of(&v("master-20260806-1a2b3c4")), None);
    }

    #[test]
    fn an_unnamed_strategy_takes_the_import_the_target_has() {
        let route = |api, version| choose(None, api, &v(version), 0).map(|c| c.route);
        assert_eq!(route(ImportApi::V1Only, "v2.3.5"), Ok(Route::PerSeg));
        assert_eq!(
            route(ImportApi::RestAutoCommit, "2.5.4"),
            Ok(Route::MergedAutoCommit)
        );
        assert_eq!(route(ImportApi::TwoPhase, "3.0.2"), Ok(Route::TwoPhase));
        let why = choose(None, ImportApi::V1Only, &v("v2.3.5"), 0)
            .unwrap()
            .why;
        assert!(why.contains("v2.3.5") && why.contains("2.4+"), "{why}");
    }

    #[test]
    fn a_named_strategy_the_target_cannot_do_is_refused_with_what_to_do() {
        let refusal =
            choose(Some(Strategy::Merged), ImportApi::V1Only, &v("v2.3.5"), 0).unwrap_err();
        assert_eq!(
            refusal.to_string(),
            "strategy \"merged\" needs REST v2 import, which Milvus v2.3.5 does not have \
             (2.4+); leave strategy unset or use per_seg"
        );
        assert_eq!(
            choose(Some(Strategy::PerSeg), ImportApi::TwoPhase, &v("3.0.2"), 0)
                .unwrap()
                .route,
            Route::PerSeg
        );
        assert_eq!(
            choose(Some(Strategy::Merged), ImportApi::TwoPhase, &v("3.0.2"), 2)
                .unwrap()
                .route,
            Route::TwoPhase
        );
    }
}
