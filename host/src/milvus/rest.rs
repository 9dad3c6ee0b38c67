//! The REST v2 import routes under `/v2/vectordb/jobs/import/` (docs/milvus-facts.md §1–2).
//!
//! Every answer is HTTP 200 with a `{code, message, data}` envelope; a non-zero `code` is an
//! error whatever the HTTP status says. Commit and abort exist only here, not on gRPC.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs as _};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{
    BoxError, CONNECT_TIMEOUT, Error, JobState, MilvusJobId, REQUEST_TIMEOUT, Result, Tls,
};

/// A client for one end's REST API.
#[derive(Debug, Clone)]
pub struct RestClient {
    end: String,
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

/// The body of `/jobs/import/create`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateImport {
    pub db_name: String,
    pub collection_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition_name: Option<String>,
    /// One inner list per file group; for backup imports, `[insert_prefix, delta_prefix?]`.
    pub files: Vec<Vec<String>>,
    /// Milvus refuses non-string option values, so the map is string to string.
    pub options: BTreeMap<String, String>,
}

/// What describe reports about one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportProgress {
    pub job_id: MilvusJobId,
    pub collection: String,
    pub state: JobState,
    pub progress: i64,
    pub reason: Option<String>,
    pub imported_rows: i64,
    pub total_rows: i64,
    /// `details[].fileName` per file group, as Milvus formats them (`"[a b]"`): lets recovery
    /// recognise a job whose create answer was lost.
    pub file_groups: Vec<String>,
}

/// One row of `/jobs/import/list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportListEntry {
    pub job_id: MilvusJobId,
    pub collection: String,
    pub state: JobState,
    pub progress: i64,
    pub reason: Option<String>,
}

/// The answer around every route's data. The data is kept as the text it came in and read
/// into the route's own type from there: a list of every job of a database is megabytes at
/// thousands of collections, and a tree of JSON values built first held several times that.
#[derive(Deserialize)]
struct Envelope<'a> {
    code: i32,
    #[serde(default)]
    message: Option<String>,
    #[serde(default, borrow)]
    data: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateData {
    job_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeData {
    #[serde(default)]
    job_id: String,
    #[serde(default)]
    collection_name: String,
    state: String,
    #[serde(default)]
    progress: i64,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    imported_rows: i64,
    #[serde(default)]
    total_rows: i64,
    #[serde(default)]
    details: Vec<DescribeDetail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeDetail {
    #[serde(default)]
    file_name: String,
}

/// `base` with its host replaced by `name`, and the addresses the original host:port
/// resolves to.
fn renamed(base: &str, name: &str) -> std::result::Result<(String, Vec<SocketAddr>), BoxError> {
    let mut url = url::Url::parse(base)?;
    let host = url.host_str().ok_or("the URI names no host")?.to_owned();
    let port = url.port_or_known_default().ok_or("the URI names no port")?;
    let addrs: Vec<SocketAddr> = (host.as_str(), port).to_socket_addrs()?.collect();
    url.set_host(Some(name))?;
    Ok((url.as_str().trim_end_matches('/').to_owned(), addrs))
}

#[derive(Deserialize)]
struct ListData {
    #[serde(default)]
    records: Vec<ListRecord>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListRecord {
    job_id: String,
    #[serde(default)]
    collection_name: String,
    state: String,
    #[serde(default)]
    progress: i64,
    #[serde(default)]
    reason: Option<String>,
}

/// An HTTP client for one of `end`'s ports at `base`, trusting and presenting what `tls`
/// says, and the base URL to send its requests to (the certificate's name in place of the
/// host, where `tls` names one).
pub(super) fn http_client(end: &str, base: &str, tls: &Tls) -> Result<(reqwest::Client, String)> {
    let unusable = |source: BoxError| Error::Unreachable {
        end: end.to_string(),
        uri: base.to_string(),
        source,
    };
    let mut base = base.trim_end_matches('/').to_string();
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT);
    if let Some(ca) = &tls.ca {
        let roots = reqwest::Certificate::from_pem_bundle(ca).map_err(|e| unusable(e.into()))?;
        builder = builder.tls_certs_only(roots);
    }
    if let Some(id) = &tls.identity {
        let pem = [id.cert.as_slice(), b"\n", id.key.as_slice()].concat();
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| unusable(e.into()))?;
        builder = builder.identity(identity);
    }
    if let Some(name) = &tls.server_name {
        // reqwest checks the certificate against the URL's host: the URL names the
        // certificate's name, resolved to the address the URI names.
        let (url, addrs) = renamed(&base, name).map_err(unusable)?;
        builder = builder.resolve_to_addrs(name, &addrs);
        base = url;
    }
    let http = builder.build().map_err(|e| unusable(e.into()))?;
    Ok((http, base))
}

/// A non-200 answer to `call` as an error, with the message of the envelope its body
/// holds, if any (Milvus answers 401 and 403 with one).
pub(super) async fn http_error(end: &str, call: String, resp: reqwest::Response) -> Error {
    let status = resp.status().as_u16();
    let message = resp
        .bytes()
        .await
        .ok()
        .and_then(|body| serde_json::from_slice::<Envelope>(&body).ok()?.message);
    Error::Http {
        end: end.to_owned(),
        call,
        status,
        message,
    }
}

impl RestClient {
    /// `base` is the end's URI (`http://host:19530`); the REST API shares the gRPC port.
    pub fn new(end: &str, base: &str, token: Option<String>, tls: &Tls) -> Result<RestClient> {
        let (http, base) = http_client(end, base, tls)?;
        Ok(RestClient {
            end: end.to_string(),
            base,
            token,
            http,
        })
    }

    /// Creates an import job. `idempotency_key` makes a retried create return the same job on
    /// servers that honour the header (3.0.2+, 2.6.24+); older servers ignore it.
    pub async fn create_import(
        &self,
        body: &CreateImport,
        idempotency_key: Option<&str>,
    ) -> Result<MilvusJobId> {
        let headers = Headers {
            idempotency_key,
            ..Headers::db(&body.db_name)
        };
        let data: CreateData = self.post("create", body, headers).await?;
        if data.job_id.parse::<i64>().is_err() {
            return Err(self.protocol("create", format!("jobId {:?} is not an int64", data.job_id)));
        }
        Ok(MilvusJobId(data.job_id))
    }

    /// The job's progress. `db` is its collection's database, sent as `DB-Name`: a job
    /// request has no `dbName`, and with authorization on Milvus 3.0 checks the `Import`
    /// privilege on the job's collection in the header's database (default without one).
    pub async fn describe(&self, db: &str, job: &MilvusJobId) -> Result<ImportProgress> {
        let d: DescribeData = self
            .post("describe", &JobIdBody { job_id: &job.0 }, Headers::db(db))
            .await?;
        let job_id = if d.job_id.is_empty() {
            job.clone()
        } else {
            MilvusJobId(d.job_id)
        };
        Ok(ImportProgress {
            job_id,
            collection: d.collection_name,
            state: JobState::parse(&d.state),
            progress: d.progress,
            reason: d.reason.filter(|r| !r.is_empty()),
            imported_rows: d.imported_rows,
            total_rows: d.total_rows,
            file_groups: d.details.into_iter().map(|x| x.file_name).collect(),
        })
    }

    /// Commits an Uncommitted job. Milvus answers 0 when the job is already Committing or
    /// Completed, so a retried commit is safe.
    pub async fn commit(&self, db: &str, job: &MilvusJobId) -> Result<()> {
        let _: IgnoredAny = self
            .post("commit", &JobIdBody { job_id: &job.0 }, Headers::db(db))
            .await?;
        Ok(())
    }

    /// Aborts a job before its commit. A repeated abort of a Failed job answers 0.
    pub async fn abort(&self, db: &str, job: &MilvusJobId) -> Result<()> {
        let _: IgnoredAny = self
            .post("abort", &JobIdBody { job_id: &job.0 }, Headers::db(db))
            .await?;
        Ok(())
    }

    /// Every import job of a collection (Milvus has no pagination here).
    pub async fn list(&self, db: &str, collection: &str) -> Result<Vec<ImportListEntry>> {
        let body = serde_json::json!({ "dbName": db, "collectionName": collection });
        let data: ListData = self.post("list", &body, Headers::db(db)).await?;
        Ok(data
            .records
            .into_iter()
            .map(|r| ImportListEntry {
                job_id: MilvusJobId(r.job_id),
                collection: r.collection_name,
                state: JobState::parse(&r.state),
                progress: r.progress,
                reason: r.reason.filter(|r| !r.is_empty()),
            })
            .collect())
    }

    async fn post<B: Serialize + ?Sized, T: serde::de::DeserializeOwned>(
        &self,
        route: &str,
        body: &B,
        headers: Headers<'_>,
    ) -> Result<T> {
        let url = format!("{}/v2/vectordb/jobs/import/{route}", self.base);
        let call = format!("import/{route}");
        let mut req = self.http.post(&url).json(body);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        if let Some(key) = headers.idempotency_key {
            req = req.header("Idempotency-Key", key);
        }
        if let Some(db) = headers.db.filter(|db| !db.is_empty()) {
            req = req.header("DB-Name", db);
        }
        let resp = req.send().await.map_err(|e| Error::Unreachable {
            end: self.end.clone(),
            uri: self.base.clone(),
            source: Box::new(e),
        })?;
        if !resp.status().is_success() {
            return Err(http_error(&self.end, call, resp).await);
        }
        let bytes = resp.bytes().await.map_err(|e| Error::Unreachable {
            end: self.end.clone(),
            uri: self.base.clone(),
            source: Box::new(e),
        })?;
        let env: Envelope = serde_json::from_slice(&bytes)
            .map_err(|e| self.protocol(&call, format!("not a Milvus envelope: {e}")))?;
        if env.code != 0 {
            return Err(Error::Api {
                end: self.end.clone(),
                call,
                code: env.code,
                message: env.message.unwrap_or_default(),
            });
        }
        let data = env.data.map_or("{}", RawValue::get);
        serde_json::from_str(data).map_err(|e| self.protocol(&call, format!("data: {e}")))
    }

    fn protocol(&self, call: &str, detail: String) -> Error {
        Error::Protocol {
            end: self.end.clone(),
            call: call.to_string(),
            detail,
        }
    }
}

/// The headers an import request carries besides authorization.
#[derive(Default)]
struct Headers<'a> {
    idempotency_key: Option<&'a str>,
    /// `DB-Name`; none or empty means the default database.
    db: Option<&'a str>,
}

impl<'a> Headers<'a> {
    fn db(db: &'a str) -> Self {
        Headers {
            db: Some(db),
            ..Headers::default()
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JobIdBody<'a> {
    job_id: &'a str,
}
