//! The answer every `/api/v1` route gives, as milvus-backup's server gives it: its codes,
//! its envelope, and the request id it carries.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::diagnostic::Problem;

/// milvus-backup's `ResponseCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum Code {
    Success = 0,
    NotSupport = 1,
    NoPermission = 2,
    Fail = 3,
    ParameterError = 400,
}

/// The envelope every `/api/v1` answer has, encoded as milvus-backup's server encodes its
/// protobuf answers with Go's `encoding/json`: `requestId`, `code` and `msg` are left out
/// when empty or 0 (so a success carries no `code`), and `data` is always there, `null`
/// when there is none.
#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    #[serde(
        rename = "requestId",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub request_id: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub code: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub msg: String,
    pub data: Option<T>,
    /// A refused request's problems, each located by its JSON field, as a refused job file's
    /// are by line and column (lockstep's own field, beside milvus-backup's: left out when
    /// there are none, so a milvus-backup client reads the envelope it knows).
    #[serde(default, skip_serializing_if = "Vec::is_empty", skip_deserializing)]
    pub problems: Vec<Problem>,
}

fn is_zero(code: &i32) -> bool {
    *code == 0
}

/// The `request_id` header, which milvus-backup's server reads on every route but
/// restore; empty (and so left out of the answer) when there is none.
pub(super) fn header_request_id(headers: &HeaderMap) -> String {
    headers
        .get("request_id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// An answer in the envelope, with `code` and `msg` and, on success, `data`.
pub(super) fn envelope<T: Serialize>(
    request_id: String,
    code: Code,
    msg: impl Into<String>,
    data: Option<T>,
) -> Response {
    axum::Json(Envelope {
        request_id,
        code: code as i32,
        msg: msg.into(),
        data,
        problems: Vec::new(),
    })
    .into_response()
}

/// A request refused for what it says (code 400, `data` null), with its `problems`.
pub(super) fn refused_request(request_id: String, msg: String, problems: &[Problem]) -> Response {
    axum::Json(Envelope::<()> {
        request_id,
        code: Code::ParameterError as i32,
        msg,
        data: None,
        problems: problems.to_vec(),
    })
    .into_response()
}

/// A request refused before any handler saw it, with `status` and the envelope's `code` and
/// `msg`, so that a milvus-backup client reads the refusal as it reads any other answer.
pub(super) fn refused(
    status: StatusCode,
    code: Code,
    headers: &HeaderMap,
    msg: String,
) -> Response {
    answered(status, header_request_id(headers), code, msg)
}

/// An answer with `status` and the envelope's `code` and `msg`, `data` null.
pub(super) fn answered(
    status: StatusCode,
    request_id: String,
    code: Code,
    msg: String,
) -> Response {
    let body = Envelope::<()> {
        request_id,
        code: code as i32,
        msg,
        data: None,
        problems: Vec::new(),
    };
    (status, axum::Json(body)).into_response()
}
