//! The few etcd v3 calls the journal makes, over tonic from the protox-compiled protos in
//! `proto/` (so no build needs `protoc`): Range (one key, or a page of a range), Txn (reads,
//! writes and deletes), a lease's grant, revoke and keep-alive, and Authenticate, over TLS
//! when the host config says.
//!
//! etcd's authentication trades a user and password for a token, which every later call
//! carries as its `token` metadata. A token expires (etcd's `--auth-token-ttl`, 5 minutes
//! unused by default, or a JWT's lifetime), and etcd then answers `Unauthenticated`: each call
//! is asked once more with a fresh token, so a journal that sat idle for an hour still saves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use milvus_proto::etcd::etcdserverpb::{
    AuthenticateRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseKeepAliveResponse, LeaseRevokeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp,
    TxnRequest, TxnResponse,
    auth_client::AuthClient,
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    lease_client::LeaseClient,
    range_request::{SortOrder, SortTarget},
    request_op::Request,
};
use milvus_proto::etcd::mvccpb::KeyValue;
use tokio::sync::mpsc;
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::config::{EtcdLocation, Secret, process_env};
use crate::milvus::Tls;

/// The largest answer taken from etcd. tonic's default, 4 MiB, is what capped a listing in
/// one range call at some thousand records; a listing now reads a page at a time
/// ([`EtcdClient::range_page`]), each a few values of at most `[journal] max_value_kib`, so
/// this bounds a page, not the journal.
pub const RESPONSE_LIMIT: usize = 16 * 1024 * 1024;

/// A channel whose calls carry the current token, when there is one.
type Authed = InterceptedService<Channel, Token>;

/// The token every call carries, shared by the clients and replaced when it expires.
#[derive(Clone, Default)]
struct Token(Arc<RwLock<Option<AsciiMetadataValue>>>);

impl tonic::service::Interceptor for Token {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        let token = self
            .0
            .read()
            .expect("no panics under the token lock")
            .clone();
        if let Some(token) = token {
            request.metadata_mut().insert("token", token);
        }
        Ok(request)
    }
}

/// A client of one etcd cluster. Every call goes to one member, the one that answered last,
/// and moves on to the next when that one cannot answer: a member that died, that lost its
/// quorum, or that a partition hides. Cheap to clone.
#[derive(Clone)]
pub struct EtcdClient {
    members: Arc<[Member]>,
    /// The member calls go to first: the last that answered.
    pinned: Arc<AtomicUsize>,
    /// The user and password a token is asked for with, when etcd checks them.
    user: Option<(String, Secret)>,
    token: Token,
}

/// The services of one member, over its own connection.
struct Member {
    url: String,
    kv: KvClient<Authed>,
    lease: LeaseClient<Authed>,
    auth: AuthClient<Channel>,
}

/// What a call failed with: the members unreachable, etcd's own answer, or what the host
/// config gives that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("{}", .0.message())]
    Status(#[from] tonic::Status),
    #[error("{0}")]
    Setup(String),
}

impl CallError {
    /// Whether the answer was larger than the client takes ([`RESPONSE_LIMIT`]): a smaller
    /// page would be taken.
    pub fn too_large(&self) -> bool {
        matches!(self, CallError::Status(status)
            if matches!(status.code(), tonic::Code::OutOfRange | tonic::Code::ResourceExhausted))
    }
}

/// One page of a range: its keys and values, and whether more follow.
pub struct Page {
    pub kvs: Vec<KeyValue>,
    pub more: bool,
}

/// The other end of a lease's keep-alive stream: send on `renew`, read the answers.
pub struct KeepAlive {
    pub renew: mpsc::Sender<LeaseKeepAliveRequest>,
    pub answers: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl EtcdClient {
    /// A client of `location`'s members, each call bounded by `timeout`, over TLS and signed
    /// in as its access says. Connects lazily, but signing in is a call: with a user, this
    /// says whether etcd is there and takes the password.
    pub async fn connect(
        location: &EtcdLocation,
        timeout: Duration,
    ) -> Result<EtcdClient, CallError> {
        let tls = (location.access.tls.as_ref())
            .map(|spec| Tls::read(spec).map(|tls| tls.tonic_config()))
            .transpose()
            .map_err(CallError::Setup)?;
        let members = (location.urls().into_iter())
            .map(|url| {
                let endpoint = Endpoint::from_shared(url.clone())?
                    .connect_timeout(timeout)
                    .timeout(timeout);
                let endpoint = match &tls {
                    Some(tls) => endpoint.tls_config(tls.clone())?,
                    None => endpoint,
                };
                Ok(endpoint.connect_lazy()).map(|channel| (url, channel))
            })
            .collect::<Result<Vec<_>, tonic::transport::Error>>()?;
        let user = match &location.access.user {
            Some((name, password)) => Some((
                name.clone(),
                password.read(&process_env).map_err(|missing| {
                    CallError::Setup(format!(
                        "etcd user {name}: its password variable {} is not set",
                        missing.0
                    ))
                })?,
            )),
            None => None,
        };
        let token = Token::default();
        let members = (members.into_iter())
            .map(|(url, channel)| Member {
                url,
                kv: KvClient::with_interceptor(channel.clone(), token.clone())
                    .max_decoding_message_size(RESPONSE_LIMIT),
                lease: LeaseClient::with_interceptor(channel.clone(), token.clone()),
                auth: AuthClient::new(channel),
            })
            .collect();
        let client = EtcdClient {
            members,
            pinned: Arc::default(),
            user,
            token,
        };
        if client.user.is_some() {
            client.on_any_member(|_| async { Ok(()) }).await?;
        }
        Ok(client)
    }

    /// Asks `member` for a token for the user, when there is one. etcd replicates a token
    /// through its log, so any member takes the one another gave.
    async fn sign_in(&self, member: &Member) -> Result<(), tonic::Status> {
        let Some((name, password)) = &self.user else {
            return Ok(());
        };
        let request = AuthenticateRequest {
            name: name.clone(),
            password: password.expose().to_owned(),
        };
        let answer = member
            .auth
            .clone()
            .authenticate(request)
            .await?
            .into_inner();
        let token = answer
            .token
            .parse()
            .map_err(|_| tonic::Status::internal("etcd answered a token that is not ASCII"))?;
        *self
            .token
            .0
            .write()
            .expect("no panics under the token lock") = Some(token);
        Ok(())
    }

    /// `call` on the pinned member, then on each other in turn while the one asked cannot
    /// answer ([`moves_on`]); signed in first when there is a user and no token yet, and once
    /// more when etcd says the token expired. The member that answers is pinned.
    ///
    /// Asking another member again is safe for every call the journal makes: a save's
    /// transaction holds only while the claim carries its lease, so one that landed before
    /// its answer was lost lands again with the same value; a claim that landed finds its
    /// own holder and takes it back ([`super::etcd`]); reads change nothing.
    async fn on_any_member<T, F, Fut>(&self, call: F) -> Result<T, CallError>
    where
        F: Fn(&Member) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let first = self.pinned.load(Ordering::Relaxed);
        let mut last = None;
        for step in 0..self.members.len() {
            let index = (first + step) % self.members.len();
            let member = &self.members[index];
            match self.signed(member, &call).await {
                Ok(answer) => {
                    self.pinned.store(index, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(status) if moves_on(&status) => {
                    tracing::debug!(member = %member.url, error = %status.message(), "etcd member cannot answer; asking the next");
                    last = Some(status);
                }
                Err(status) => return Err(status.into()),
            }
        }
        Err(last.expect("a location has at least one member").into())
    }

    /// Moves the pin on to the next member: a caller that gave up on a call within its own
    /// deadline, shorter than a member's connect timeout (a lease's renewal), had no chance
    /// to move on itself, and asks another member first next time.
    pub fn unpin(&self) {
        let next = (self.pinned.load(Ordering::Relaxed) + 1) % self.members.len();
        self.pinned.store(next, Ordering::Relaxed);
    }

    /// `call` on `member`, signed in first when there is no token yet, and asked once more
    /// with a fresh token when etcd says the one it carried is no longer good.
    async fn signed<T, F, Fut>(&self, member: &Member, call: &F) -> Result<T, tonic::Status>
    where
        F: Fn(&Member) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        if self.user.is_none() {
            return call(member).await;
        }
        let unsigned = (self.token.0.read())
            .expect("no panics under the token lock")
            .is_none();
        if unsigned {
            self.sign_in(member).await?;
        }
        match call(member).await {
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                self.sign_in(member).await?;
                call(member).await
            }
            answer => answer,
        }
    }

    /// The value at `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, CallError> {
        Ok(self.range(get(key)).await?.kvs.into_iter().next())
    }

    /// Up to `limit` keys from `from` (inclusive) to `end` (exclusive), in key order, and
    /// whether more follow: one page of a range, so that no answer holds every value under a
    /// prefix. The next page starts just past the last key: [`after`].
    pub async fn range_page(&self, from: &[u8], end: &[u8], limit: i64) -> Result<Page, CallError> {
        self.page(RangeRequest {
            key: from.to_vec(),
            range_end: end.to_vec(),
            limit,
            ..Default::default()
        })
        .await
    }

    /// Up to `limit` keys from `from` (inclusive) to `end` (exclusive), the last first, without
    /// their values, and whether more precede them: one page of a range read backwards, as
    /// the newest entries of an index are. The next page ends at the last key given.
    pub async fn keys_page_backwards(
        &self,
        from: &[u8],
        end: &[u8],
        limit: i64,
    ) -> Result<Page, CallError> {
        self.page(RangeRequest {
            key: from.to_vec(),
            range_end: end.to_vec(),
            limit,
            sort_order: SortOrder::Descend as i32,
            sort_target: SortTarget::Key as i32,
            keys_only: true,
            ..Default::default()
        })
        .await
    }

    /// How many keys are under `prefix`, counted by etcd (no key is sent): the cheapest call
    /// that proves etcd answers.
    pub async fn count_prefix(&self, prefix: &str) -> Result<i64, CallError> {
        let answer = self
            .range(RangeRequest {
                key: prefix.as_bytes().to_vec(),
                range_end: prefix_end(prefix.as_bytes()),
                count_only: true,
                ..Default::default()
            })
            .await?;
        Ok(answer.count)
    }

    async fn page(&self, request: RangeRequest) -> Result<Page, CallError> {
        let answer = self.range(request).await?;
        Ok(Page {
            kvs: answer.kvs,
            more: answer.more,
        })
    }

    async fn range(&self, request: RangeRequest) -> Result<RangeResponse, CallError> {
        let answer = self
            .on_any_member(|member| {
                let (mut kv, request) = (member.kv.clone(), request.clone());
                async move { kv.range(request).await }
            })
            .await?;
        Ok(answer.into_inner())
    }

    /// `success` if every comparison holds, else `failure`, atomically.
    pub async fn txn(
        &self,
        compare: Vec<Compare>,
        success: Vec<RequestOp>,
        failure: Vec<RequestOp>,
    ) -> Result<TxnResponse, CallError> {
        let request = TxnRequest {
            compare,
            success,
            failure,
        };
        let answer = self
            .on_any_member(|member| {
                let (mut kv, request) = (member.kv.clone(), request.clone());
                async move { kv.txn(request).await }
            })
            .await?;
        Ok(answer.into_inner())
    }

    /// A new lease of `ttl`; its id.
    pub async fn lease_grant(&self, ttl: Duration) -> Result<i64, CallError> {
        let request = LeaseGrantRequest {
            ttl: ttl.as_secs() as i64,
            id: 0,
        };
        let answer = self
            .on_any_member(|member| {
                let mut lease = member.lease.clone();
                async move { lease.lease_grant(request).await }
            })
            .await?;
        Ok(answer.into_inner().id)
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), CallError> {
        self.on_any_member(|member| {
            let mut lease = member.lease.clone();
            async move { lease.lease_revoke(LeaseRevokeRequest { id }).await }
        })
        .await?;
        Ok(())
    }

    /// Opens the keep-alive stream of lease `id`, renewing it once: the first answer on
    /// it is that renewal's. (etcd answers the call only once a request came, so the first
    /// one goes out with the call.) Each later renewal is a request on `renew`.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<KeepAlive, CallError> {
        let open = |member: &Member| {
            let mut lease = member.lease.clone();
            async move {
                let (renew, requests) = mpsc::channel(4);
                renew
                    .try_send(LeaseKeepAliveRequest { id })
                    .expect("a new channel has room");
                let answers = lease
                    .lease_keep_alive(tokio_stream_of(requests))
                    .await?
                    .into_inner();
                Ok(KeepAlive { renew, answers })
            }
        };
        self.on_any_member(open).await
    }
}

/// Whether a call that failed with `status` may be asked of another member: the member
/// could not be reached or gave up (no leader, a timeout, a member stopping), rather than
/// answering the request.
fn moves_on(status: &tonic::Status) -> bool {
    use tonic::Code;
    matches!(
        status.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled
    )
}

/// A receiver as the request stream tonic sends from.
fn tokio_stream_of(
    mut rx: mpsc::Receiver<LeaseKeepAliveRequest>,
) -> impl futures::Stream<Item = LeaseKeepAliveRequest> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The key just past every key that starts with `prefix`, as etcd's clients compute it:
/// the prefix with its last byte below 0xff incremented (and the bytes after it dropped).
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte 0xff, or empty: to the end of the keyspace.
    vec![0]
}

/// The first key after `key`: where the page after one ending at `key` starts.
pub fn after(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

fn get(key: &str) -> RangeRequest {
    RangeRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// An operation of a transaction: read `key`.
pub fn op_get(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestRange(get(key))),
    }
}

/// An operation of a transaction: write `value` at `key`, under `lease` (0 for none).
pub fn op_put(key: &str, value: impl Into<Vec<u8>>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestPut(PutRequest {
            key: key.as_bytes().to_vec(),
            value: value.into(),
            lease,
        })),
    }
}

/// An operation of a transaction: delete `key`.
pub fn op_delete(key: &str) -> RequestOp {
    // An empty end deletes the one key.
    op_delete_range(key.as_bytes(), &[])
}

/// An operation of a transaction: delete every key from `from` (inclusive) to `end`
/// (exclusive).
pub fn op_delete_range(from: &[u8], end: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Request::RequestDeleteRange(DeleteRangeRequest {
            key: from.to_vec(),
            range_end: end.to_vec(),
        })),
    }
}

/// `key` was never created (or was deleted): its create revision is 0.
pub fn absent(key: &str) -> Compare {
    equal(key, CompareTarget::Create, TargetUnion::CreateRevision(0))
}

/// `key` was last modified at `revision`.
pub fn modified_at(key: &str, revision: i64) -> Compare {
    equal(key, CompareTarget::Mod, TargetUnion::ModRevision(revision))
}

/// `key` is attached to `lease`.
pub fn under_lease(key: &str, lease: i64) -> Compare {
    equal(key, CompareTarget::Lease, TargetUnion::Lease(lease))
}

fn equal(key: &str, target: CompareTarget, value: TargetUnion) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: target as i32,
        key: key.as_bytes().to_vec(),
        target_union: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_ends_just_past_its_keys() {
        assert_eq!(
            prefix_end(b"/lockstep/record/"),
            b"/lockstep/record0".to_vec()
        );
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }
}
