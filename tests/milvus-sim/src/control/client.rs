//! `SimControl`: a typed client of one cluster's control API, for tests, benchmarks and the
//! fault runner (which may run in another process than the Sim).

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    ApiFaultRequest, ClusterSnapshot, DeleteObjects, Deleted, RestartRequest, StreamUpdate,
};
use crate::cdc::{Flow, StreamSnapshot};
use crate::cluster::Cluster;
use crate::faults::{
    ApiEffect, ApiFace, ChangedRow, JobFailure, LostAnswer, LostDelete, ShortImport,
};

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control request {route} failed: {source}")]
    Http {
        route: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("control request {route} refused with HTTP {status}: {body}")]
    Refused {
        route: String,
        status: u16,
        body: String,
    },
    #[error("cluster at {uri} did not answer within {waited:?}")]
    NotReady { uri: String, waited: Duration },
}

impl Cluster {
    /// A control-API client for this cluster.
    pub fn control(&self) -> SimControl {
        SimControl::new(self.uri())
    }
}

/// Client of `/sim/v1/...` on one cluster.
#[derive(Debug, Clone)]
pub struct SimControl {
    base: String,
    http: reqwest::Client,
}

/// Durations travel as Go duration strings.
fn go(d: Duration) -> String {
    format!("{}us", d.as_micros())
}

impl SimControl {
    /// `uri` is the cluster's `http://127.0.0.1:PORT`.
    pub fn new(uri: impl Into<String>) -> Self {
        SimControl {
            base: uri.into().trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
        }
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        route: &str,
        body: Option<&B>,
    ) -> Result<T, ControlError> {
        let http_err = |source| ControlError::Http {
            route: route.to_owned(),
            source,
        };
        let mut request = self.http.request(method, format!("{}{route}", self.base));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(http_err)?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            return Err(ControlError::Refused {
                route: route.to_owned(),
                status: status.as_u16(),
                body,
            });
        }
        response.json().await.map_err(http_err)
    }

    /// `GET /sim/v1/state`.
    pub async fn state(&self) -> Result<ClusterSnapshot, ControlError> {
        self.call::<(), _>(reqwest::Method::GET, "/sim/v1/state", None)
            .await
    }

    pub async fn set_stream_lag(
        &self,
        target: &str,
        lag: Duration,
    ) -> Result<StreamSnapshot, ControlError> {
        self.update_stream(
            target,
            StreamUpdate {
                lag: Some(go(lag)),
                flow: None,
            },
        )
        .await
    }

    pub async fn pause_stream(&self, target: &str) -> Result<StreamSnapshot, ControlError> {
        self.update_stream(
            target,
            StreamUpdate {
                lag: None,
                flow: Some(Flow::Paused),
            },
        )
        .await
    }

    pub async fn resume_stream(&self, target: &str) -> Result<StreamSnapshot, ControlError> {
        self.update_stream(
            target,
            StreamUpdate {
                lag: None,
                flow: Some(Flow::Flowing),
            },
        )
        .await
    }

    async fn update_stream(
        &self,
        target: &str,
        update: StreamUpdate,
    ) -> Result<StreamSnapshot, ControlError> {
        self.call(
            reqwest::Method::POST,
            &format!("/sim/v1/streams/{target}"),
            Some(&update),
        )
        .await
    }

    /// Fails the next job (or a named one) when it reaches a state.
    pub async fn fail_job(&self, failure: &JobFailure) -> Result<(), ControlError> {
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/job",
            Some(failure),
        )
        .await
        .map(drop)
    }

    /// The next job (or a named one) completes with `short.rows` fewer rows than it read.
    pub async fn short_import(&self, short: &ShortImport) -> Result<(), ControlError> {
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/short_import",
            Some(short),
        )
        .await
        .map(drop)
    }

    /// The next job whose own deletes remove a row keeps one, and reports the rows it should
    /// have.
    pub async fn lost_delete(&self, lost: &LostDelete) -> Result<(), ControlError> {
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/lost_delete",
            Some(lost),
        )
        .await
        .map(drop)
    }

    /// The next job that imports a row shows one of them to a query with one value
    /// changed, and reports the rows it should have.
    pub async fn changed_row(&self, changed: &ChangedRow) -> Result<(), ControlError> {
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/changed_row",
            Some(changed),
        )
        .await
        .map(drop)
    }

    /// The REST create that makes the selected job makes it, and its answer is lost.
    pub async fn lose_answer(&self, lost: &LostAnswer) -> Result<(), ControlError> {
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/lost_answer",
            Some(lost),
        )
        .await
        .map(drop)
    }

    /// REST and/or gRPC answer 503 / Unavailable, or late, for `duration`.
    pub async fn api_fault(
        &self,
        face: ApiFace,
        effect: ApiEffect,
        duration: Duration,
    ) -> Result<(), ControlError> {
        let request = ApiFaultRequest {
            face,
            effect,
            duration: go(duration),
        };
        self.call::<_, serde_json::Value>(
            reqwest::Method::POST,
            "/sim/v1/faults/api",
            Some(&request),
        )
        .await
        .map(drop)
    }

    pub async fn clear_faults(&self) -> Result<(), ControlError> {
        self.call::<(), serde_json::Value>(reqwest::Method::DELETE, "/sim/v1/faults", None)
            .await
            .map(drop)
    }

    pub async fn delete_objects(&self, objects: &DeleteObjects) -> Result<usize, ControlError> {
        let deleted: Deleted = self
            .call(
                reqwest::Method::POST,
                "/sim/v1/storage/delete",
                Some(objects),
            )
            .await?;
        Ok(deleted.deleted)
    }

    /// Restarts the cluster: its port refuses connections for `down_for`. Returns at once;
    /// use [`SimControl::wait_ready`] to wait for it to come back.
    pub async fn restart(&self, down_for: Duration) -> Result<(), ControlError> {
        let request = RestartRequest {
            down_for: go(down_for),
        };
        self.call::<_, serde_json::Value>(reqwest::Method::POST, "/sim/v1/restart", Some(&request))
            .await
            .map(drop)
    }

    /// Polls the state route until it answers (the cluster is up), for at most `within`.
    pub async fn wait_ready(&self, within: Duration) -> Result<(), ControlError> {
        let start = tokio::time::Instant::now();
        loop {
            if self.state().await.is_ok() {
                return Ok(());
            }
            if start.elapsed() >= within {
                return Err(ControlError::NotReady {
                    uri: self.base.clone(),
                    waited: within,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
