//! Talking to Milvus: the REST v2 import routes (the only place two-phase commit and abort
//! exist), the gRPC MilvusService subset for DDL, version and replication topology, the
//! management API of its metrics port for settings no RPC reports, and the types the engine
//! sees in place of wire fields.
//!
//! Wire formats stay here: the engine sees [`JobState`], [`MilvusJobId`] and [`Error`], never a
//! JSON envelope or a raw `code`.

mod gate;
mod grpc;
mod management;
mod rest;
mod tls;
pub mod topology;
pub mod version;

use std::fmt;
use std::time::Duration;

pub use grpc::{CollectionInfo, GrpcClient, IndexSpec, ReplicateProgress, V1ImportState};
pub use management::ManagementClient;
pub use rest::{CreateImport, ImportListEntry, ImportProgress, RestClient};
pub use tls::{Identity, Tls};
pub use topology::Topology;
pub use version::ServerVersion;

/// How long to wait for a TCP connection to an end before calling it unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Upper bound on one request. Import create lists the files on the server side, which for
/// a 256-segment batch can take a while; milvus-backup sends `Request-Timeout: 600` for it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// An import job id as Milvus allocates it: a decimal int64, carried as a string on REST.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct MilvusJobId(pub String);

impl fmt::Display for MilvusJobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The external job state REST reports (docs/milvus-facts.md §1.4). `Unknown` covers `None` and
/// any name this version of lockstep does not know.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum JobState {
    Pending,
    Importing,
    Uncommitted,
    Committing,
    Completed,
    Failed,
    Unknown,
}

impl JobState {
    pub fn parse(s: &str) -> JobState {
        match s {
            "Pending" => JobState::Pending,
            "Importing" => JobState::Importing,
            "Uncommitted" => JobState::Uncommitted,
            "Committing" => JobState::Committing,
            "Completed" => JobState::Completed,
            "Failed" => JobState::Failed,
            _ => JobState::Unknown,
        }
    }

    /// Uncommitted, or already past it: the commit may be sent (or was, by someone).
    pub fn is_ready_to_commit(self) -> bool {
        matches!(
            self,
            JobState::Uncommitted | JobState::Committing | JobState::Completed
        )
    }

    /// No further transition will happen without a commit or an abort from outside.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Completed | JobState::Failed)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a transport failure comes down to, its innermost cause ("Connection refused (os
/// error 111)", a certificate not trusted): the causes around it only wrap it, with the URI
/// again or in Debug form (a tonic `Status` prints its metadata map), which a person need
/// not read.
fn innermost(source: &BoxError) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = source.as_ref();
    while let Some(next) = cause.source() {
        cause = next;
    }
    match cause.downcast_ref::<tonic::Status>() {
        Some(status) => status.message().to_owned(),
        None => cause.to_string(),
    }
}

/// What went wrong talking to one end.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{end}: cannot reach {uri}: {}", innermost(source))]
    Unreachable {
        end: String,
        uri: String,
        #[source]
        source: BoxError,
    },
    /// A non-200 answer; `message` is the envelope's, when the body has one (Milvus answers
    /// 401 and 403 with one: an unauthenticated user, a privilege the user lacks).
    #[error("{end}: {call} answered HTTP {status}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Http {
        end: String,
        call: String,
        status: u16,
        message: Option<String>,
    },
    #[error("{end}: {call} failed with code {code}: {message}")]
    Api {
        end: String,
        call: String,
        code: i32,
        message: String,
    },
    #[error("{end}: {call}: unexpected answer: {detail}")]
    Protocol {
        end: String,
        call: String,
        detail: String,
    },
}

impl Error {
    /// Worth trying again: the end was away, overloaded or restarting. Everything else is an
    /// answer, and asking again gets the same answer.
    pub fn is_retriable(&self) -> bool {
        match self {
            Error::Unreachable { .. } => true,
            Error::Http { status, .. } => *status >= 500 || *status == 429,
            // merr: 1 not ready, 2 unavailable, 8 rate limit, 1807 HTTP rate limit,
            // 2101 import failed on the server side (the job limit among them), 10001
            // timeout. An unknown job is 2101 too since Milvus #50221, and is an answer.
            Error::Api { code, .. } if !self.is_job_not_found() => {
                matches!(code, 1 | 2 | 8 | 1807 | 2101 | 10001)
            }
            Error::Api { .. } => false,
            Error::Protocol { .. } => false,
        }
    }

    /// The call never reached the end: its connection was refused or could not be made, so
    /// nothing was asked of it. Only such a failure may be retried for a call that is not
    /// idempotent (a v1 `Import`, which has no key): one whose answer was lost may have
    /// started a task, and asking again would import twice.
    pub fn never_sent(&self) -> bool {
        let Error::Unreachable { source, .. } = self else {
            return false;
        };
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
        while let Some(e) = cause {
            let text = e.to_string();
            if text.contains("tcp connect error")
                || text.contains("client error (Connect)")
                || text.contains("Connection refused")
            {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// The request may have gone out and no answer of Milvus's came back: a connection that
    /// broke after it was sent or a timeout, an HTTP 5xx a gateway sent in Milvus's place (a
    /// Milvus proxy answers HTTP 200 with an envelope), or a body that does not read. The
    /// call may have been carried out; a code in an envelope is Milvus's own answer, and a
    /// call [`never_sent`](Self::never_sent) was not.
    pub fn answer_lost(&self) -> bool {
        match self {
            Error::Unreachable { .. } => !self.never_sent(),
            Error::Http { status, .. } => *status >= 500,
            Error::Protocol { .. } => true,
            Error::Api { .. } => false,
        }
    }

    /// The end does not know the job: describe answers "import job does not exist", commit
    /// and abort "job N not found" (2100, or 2101 on 3.0). On a secondary this is also what
    /// a mirror looks like before its ImportMsg arrived over CDC, and on any end what a job
    /// looks like after `dataCoord.import.taskRetention`.
    pub fn is_job_not_found(&self) -> bool {
        matches!(self, Error::Api { code: 2100 | 2101, message, .. }
            if message.contains("import job does not exist")
                || (message.starts_with("job ") && message.contains(" not found")))
    }

    /// The end's import job budget is full (`dataCoord.import.maxImportJobNum`): it takes
    /// no new job, nor looks an Idempotency-Key up, until one ends (milvus#53228 admits
    /// before it looks the key up).
    pub fn is_job_limit(&self) -> bool {
        matches!(self, Error::Api { code: 2101, message, .. }
            if message.contains("number of jobs has reached the limit"))
    }

    /// The end refuses the caller: no or wrong credentials (HTTP 401), or a privilege the
    /// user lacks (HTTP 403, with Milvus's `permission deny` in the body).
    pub fn is_denied(&self) -> bool {
        matches!(
            self,
            Error::Http {
                status: 401 | 403,
                ..
            }
        )
    }

    /// The server has no such route (HTTP 404): a Milvus before 2.4 has no REST v2 import,
    /// one before 3.0 no commit or abort.
    pub fn is_missing_route(&self) -> bool {
        matches!(self, Error::Http { status: 404, .. })
    }

    /// The database named does not exist (merr 800, `database not found`).
    pub fn is_database_missing(&self) -> bool {
        matches!(self, Error::Api { code: 800, .. })
    }

    /// The collection does not exist (merr 100, `collection not found`): never created, or
    /// dropped since.
    pub fn is_collection_missing(&self) -> bool {
        matches!(self, Error::Api { code: 100, .. })
    }

    /// The collection has no index (merr 700, `index not found`): Milvus will not load a
    /// collection whose vector field has none.
    pub fn is_index_missing(&self) -> bool {
        matches!(self, Error::Api { code: 700, .. })
    }

    /// The target refuses imports because it replicates and
    /// `dataCoord.import.enableInReplicatingCluster` is off (merr 3000, operation not
    /// supported).
    pub fn is_replicated_import_disabled(&self) -> bool {
        matches!(self, Error::Api { code: 3000, .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whether an import job's failure reason says it found no file under its paths, as Milvus
/// words it (`no binlog to import`): on a mirror, the files were not where it reads.
pub fn found_no_files(reason: &str) -> bool {
    reason.contains("no binlog to import")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable(source: std::io::Error) -> Error {
        Error::Unreachable {
            end: "t".into(),
            uri: "http://t:19530".into(),
            source: Box::new(source),
        }
    }

    /// A v1 import is sent again only when it certainly never left: a refused connection,
    /// not one reset after the request went out.
    #[test]
    fn only_a_connection_never_made_counts_as_never_sent() {
        use std::io::{Error as Io, ErrorKind};
        let refused = Io::new(
            ErrorKind::ConnectionRefused,
            "tcp connect error: Connection refused (os error 111)",
        );
        assert!(unreachable(refused).never_sent());
        let wrapped = tonic::Status::from_error(Box::new(Io::new(
            ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        )));
        let wrapped = Error::Unreachable {
            end: "t".into(),
            uri: "http://t:19530".into(),
            source: Box::new(wrapped),
        };
        assert_eq!(
            wrapped.to_string(),
            "t: cannot reach http://t:19530: Connection refused (os error 111)",
            "the innermost cause, once, and no Debug of the status"
        );
        let reset = Io::new(ErrorKind::ConnectionReset, "connection reset by peer");
        assert!(!unreachable(reset).never_sent());
        let answer = Error::Api {
            end: "t".into(),
            call: "Import".into(),
            code: 2101,
            message: "busy".into(),
        };
        assert!(!answer.never_sent());
    }

    /// A create whose answer was lost may have made its job; Milvus's own refusal, or a
    /// request that never left, did not.
    #[test]
    fn an_answer_is_lost_when_the_request_left_and_milvus_said_nothing() {
        use std::io::{Error as Io, ErrorKind};
        let reset = Io::new(ErrorKind::ConnectionReset, "connection reset by peer");
        assert!(unreachable(reset).answer_lost());
        let refused = Io::new(ErrorKind::ConnectionRefused, "Connection refused");
        assert!(!unreachable(refused).answer_lost());
        let http = |status| Error::Http {
            end: "t".into(),
            call: "create".into(),
            status,
            message: None,
        };
        assert!(http(503).answer_lost() && http(502).answer_lost());
        assert!(!http(429).answer_lost() && !http(403).answer_lost());
        let limit = Error::Api {
            end: "t".into(),
            call: "create".into(),
            code: 2101,
            message: "The number of jobs has reached the limit".into(),
        };
        assert!(!limit.answer_lost(), "a refusal is an answer");
    }
}
