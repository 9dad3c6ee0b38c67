//! Milvus's management API, which its metrics port serves (9091 by default) apart from gRPC
//! and REST (docs/milvus-facts.md §4.6): where a client reads the settings no RPC reports,
//! such as the replicated import gate.
//!
//! `GET /api/v1/_cluster/configs` answers one flat JSON object: every setting under its
//! `milvus.yaml` path, lowercased. Newer builds key a setting changed at run time without
//! separators, so keys are compared with `.`, `_` and `/` removed.

use std::collections::BTreeMap;

use serde_json::Value;

use super::rest::{http_client, http_error};
use super::{Error, Result, Tls};

/// `dataCoord.import.enableInReplicatingCluster`, as a configs key is compared.
const REPLICATED_IMPORT_GATE: &str = "datacoordimportenableinreplicatingcluster";

/// A client for one end's management API.
#[derive(Debug, Clone)]
pub struct ManagementClient {
    end: String,
    /// The URI as the host config gives it.
    uri: String,
    /// Where requests go (the certificate's name in place of the host, where TLS names one).
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl ManagementClient {
    /// `base` is the end's management URI (`http://host:9091`); the API is asked with the
    /// end's own token and TLS, as Milvus guards it like its REST port.
    pub fn new(
        end: &str,
        base: &str,
        token: Option<String>,
        tls: &Tls,
    ) -> Result<ManagementClient> {
        let (http, routed) = http_client(end, base, tls)?;
        Ok(ManagementClient {
            end: end.to_owned(),
            uri: base.trim_end_matches('/').to_owned(),
            base: routed,
            token,
            http,
        })
    }

    /// The management URI, as the host config gives it.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// `dataCoord.import.enableInReplicatingCluster` as the end runs with it; `None` when its
    /// settings do not list it.
    pub async fn replicated_import_gate(&self) -> Result<Option<bool>> {
        const CALL: &str = "_cluster/configs";
        let configs = self.configs().await?;
        let Some(value) = configs.get(REPLICATED_IMPORT_GATE) else {
            return Ok(None);
        };
        let text = match value {
            Value::String(s) => s.to_ascii_lowercase(),
            other => other.to_string(),
        };
        match text.as_str() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(Error::Protocol {
                end: self.end.clone(),
                call: CALL.to_owned(),
                detail: format!("{REPLICATED_IMPORT_GATE} is {value}, not true or false"),
            }),
        }
    }

    /// Every setting the end reports, by its key with separators removed.
    async fn configs(&self) -> Result<BTreeMap<String, Value>> {
        let call = "_cluster/configs".to_owned();
        let mut request = self.http.get(format!("{}/api/v1/{call}", self.base));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let unreachable = |e: reqwest::Error| Error::Unreachable {
            end: self.end.clone(),
            uri: self.uri.clone(),
            source: Box::new(e),
        };
        let resp = request.send().await.map_err(unreachable)?;
        if !resp.status().is_success() {
            return Err(http_error(&self.end, call, resp).await);
        }
        let body = resp.bytes().await.map_err(unreachable)?;
        let configs: BTreeMap<String, Value> =
            serde_json::from_slice(&body).map_err(|e| Error::Protocol {
                end: self.end.clone(),
                call,
                detail: format!("not a JSON object of settings: {e}"),
            })?;
        Ok(configs
            .into_iter()
            .map(|(key, value)| (comparable(&key), value))
            .collect())
    }
}

/// A configs key as keys are compared: lowercased, without `.`, `_` or `/`.
fn comparable(key: &str) -> String {
    key.chars()
        .filter(|c| !matches!(c, '.' | '_' | '/'))
        .flat_map(char::to_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_the_same_written_with_dots_or_without_separators() {
        assert_eq!(
            comparable("dataCoord.import.enableInReplicatingCluster"),
            REPLICATED_IMPORT_GATE
        );
        assert_eq!(
            comparable("datacoordimportenableinreplicatingcluster"),
            REPLICATED_IMPORT_GATE
        );
        assert_eq!(
            comparable("dataCoord/import/enable_in_replicating_cluster"),
            REPLICATED_IMPORT_GATE
        );
    }
}
