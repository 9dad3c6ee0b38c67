//! Milvus's error codes and messages (`pkg/util/merr`), shared by the REST and gRPC faces so a
//! refusal reads the same on both. Milvus wraps a base error with context as
//! `"<context>: <base message>"`; the constructors below keep that shape.

use milvus_proto::common::{ErrorCode, Status};

/// The merr codes milvus-sim answers with (docs/milvus-facts.md §4.1).
pub mod code {
    pub const SUCCESS: i32 = 0;
    pub const COLLECTION_NOT_FOUND: i32 = 100;
    /// `ErrCollectionDDLImportConflict` (milvus#53071): not retriable.
    pub const COLLECTION_DDL_IMPORT_CONFLICT: i32 = 112;
    pub const PARTITION_NOT_FOUND: i32 = 200;
    pub const INDEX_NOT_FOUND: i32 = 700;
    pub const INDEX_DUPLICATE: i32 = 702;
    pub const DATABASE_NOT_FOUND: i32 = 800;
    pub const PARAMETER_INVALID: i32 = 1100;
    pub const PARAMETER_MISSING: i32 = 1101;
    pub const NEED_AUTHENTICATE: i32 = 1800;
    pub const INCORRECT_PARAMETER_FORMAT: i32 = 1801;
    pub const MISSING_REQUIRED_PARAMETERS: i32 = 1802;
    pub const IMPORT_FAILED: i32 = 2100;
    pub const IMPORT_SYS_FAILED: i32 = 2101;
    pub const OPERATION_NOT_SUPPORTED: i32 = 3000;
    pub const UNEXPECTED: i32 = 65535;
}

/// A refusal as Milvus phrases it: the merr code and the full message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct MilvusError {
    pub code: i32,
    pub message: String,
}

impl MilvusError {
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        MilvusError {
            code,
            message: message.into(),
        }
    }

    /// `merr.WrapErrImportFailed(msg)`: "<msg>: importing data failed", code 2100.
    pub fn import_failed(msg: impl std::fmt::Display) -> Self {
        Self::new(code::IMPORT_FAILED, format!("{msg}: importing data failed"))
    }

    /// `merr.WrapErrImportSysFailedMsg(msg)`: "<msg>: importing data failed on server side",
    /// code 2101 (a server-side condition: an unknown job, the job limit).
    pub fn import_sys_failed(msg: impl std::fmt::Display) -> Self {
        Self::new(
            code::IMPORT_SYS_FAILED,
            format!("{msg}: importing data failed on server side"),
        )
    }

    /// `merr.WrapErrParameterInvalid(expected, actual)`.
    pub fn parameter_invalid(
        expected: impl std::fmt::Display,
        actual: impl std::fmt::Display,
    ) -> Self {
        Self::new(
            code::PARAMETER_INVALID,
            format!("invalid parameter[expected={expected}][actual={actual}]"),
        )
    }

    /// `merr.WrapErrOperationNotSupportedMsg(msg)`.
    pub fn operation_not_supported(msg: impl std::fmt::Display) -> Self {
        Self::new(
            code::OPERATION_NOT_SUPPORTED,
            format!("{msg}: unsupported operation"),
        )
    }

    /// Schema DDL refused while `collection` has an unfinished import job (milvus#53071's
    /// `WrapErrCollectionDDLImportConflict`, docs/milvus-facts.md §2.8). The context is the
    /// PR's; the base message after it is [infer].
    pub fn collection_ddl_import_conflict(collection: &str, job_id: i64, state: &str) -> Self {
        Self::new(
            code::COLLECTION_DDL_IMPORT_CONFLICT,
            format!(
                "import job {job_id} in state {state} is in flight, retry the ddl after it finishes: collection ddl conflicts with an import job[collection={collection}]"
            ),
        )
    }

    pub fn collection_not_found(db: &str, collection: &str) -> Self {
        Self::new(
            code::COLLECTION_NOT_FOUND,
            format!("collection not found[database={db}][collection={collection}]"),
        )
    }

    pub fn database_not_found(db: &str) -> Self {
        Self::new(
            code::DATABASE_NOT_FOUND,
            format!("database not found[database={db}]"),
        )
    }

    pub fn partition_not_found(partition: &str) -> Self {
        Self::new(
            code::PARTITION_NOT_FOUND,
            format!("partition not found[partition={partition}]"),
        )
    }

    pub fn index_not_found(collection: &str) -> Self {
        Self::new(
            code::INDEX_NOT_FOUND,
            format!("index not found[collection={collection}]"),
        )
    }

    /// A write broadcast on a replication standby: `broadcaster.ErrNotPrimary`, a plain Go
    /// error, hence 65535 (docs/milvus-facts.md §2.4).
    pub fn not_primary() -> Self {
        Self::new(
            code::UNEXPECTED,
            "cluster is not primary, cannot do any DDL/DCL",
        )
    }

    /// The `common.Status` that carries this error over gRPC.
    pub fn to_status(&self) -> Status {
        let error_code = match self.code {
            code::COLLECTION_NOT_FOUND => ErrorCode::CollectionNotExists,
            code::INDEX_NOT_FOUND => ErrorCode::IndexNotExist,
            code::PARAMETER_INVALID => ErrorCode::IllegalArgument,
            _ => ErrorCode::UnexpectedError,
        };
        Status {
            error_code: error_code as i32,
            reason: self.message.clone(),
            code: self.code,
            ..Status::default()
        }
    }
}

/// The success `common.Status`.
pub fn success() -> Status {
    Status::default()
}
