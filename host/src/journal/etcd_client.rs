//! The few etcd v3 calls the journal makes, over tonic from the protox-compiled protos in
//! `proto/` (so no build needs `protoc`): Range, Txn, and a lease's grant, revoke and
//! keep-alive.

use std::time::Duration;

use milvus_proto::etcd::etcdserverpb::{
    Compare, LeaseGrantRequest, LeaseKeepAliveRequest, LeaseKeepAliveResponse, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest, TxnResponse,
    compare::{CompareResult, CompareTarget, TargetUnion},
    kv_client::KvClient,
    lease_client::LeaseClient,
    request_op::Request,
};
use milvus_proto::etcd::mvccpb::KeyValue;
use tokio::sync::mpsc;
use tonic::transport::{Channel, Endpoint};

/// A client of one etcd cluster, its members balanced. Cheap to clone.
#[derive(Clone)]
pub struct EtcdClient {
    kv: KvClient<Channel>,
    lease: LeaseClient<Channel>,
}

/// What a call failed with: the members unreachable, or etcd's own answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("{}", .0.message())]
    Status(#[from] tonic::Status),
}

/// The other end of a lease's keep-alive stream: send on `renew`, read the answers.
pub struct KeepAlive {
    pub renew: mpsc::Sender<LeaseKeepAliveRequest>,
    pub answers: tonic::Streaming<LeaseKeepAliveResponse>,
}

impl EtcdClient {
    /// A client of `endpoints` (`HOST:PORT`, or with `http://`), each call bounded by
    /// `timeout`. Connects lazily: the first call says whether etcd is there.
    pub fn new(endpoints: &[String], timeout: Duration) -> Result<EtcdClient, CallError> {
        let members = endpoints
            .iter()
            .map(|e| {
                let uri = if e.contains("://") {
                    e.clone()
                } else {
                    format!("http://{e}")
                };
                Endpoint::from_shared(uri).map(|m| m.connect_timeout(timeout).timeout(timeout))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let channel = Channel::balance_list(members.into_iter());
        Ok(EtcdClient {
            kv: KvClient::new(channel.clone()),
            lease: LeaseClient::new(channel),
        })
    }

    /// The value at `key`, if any.
    pub async fn get(&self, key: &str) -> Result<Option<KeyValue>, CallError> {
        let answer = self.kv.clone().range(get(key)).await?.into_inner();
        Ok(answer.kvs.into_iter().next())
    }

    /// Every key under `prefix`, in key order.
    pub async fn get_prefix(&self, prefix: &str) -> Result<Vec<KeyValue>, CallError> {
        let request = RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            ..Default::default()
        };
        Ok(self.kv.clone().range(request).await?.into_inner().kvs)
    }

    /// How many keys are under `prefix`: the cheapest call that proves etcd answers.
    pub async fn count_prefix(&self, prefix: &str) -> Result<i64, CallError> {
        let request = RangeRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            count_only: true,
            ..Default::default()
        };
        Ok(self.kv.clone().range(request).await?.into_inner().count)
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
        Ok(self.kv.clone().txn(request).await?.into_inner())
    }

    /// A new lease of `ttl`; its id.
    pub async fn lease_grant(&self, ttl: Duration) -> Result<i64, CallError> {
        let request = LeaseGrantRequest {
            ttl: ttl.as_secs() as i64,
            id: 0,
        };
        Ok(self
            .lease
            .clone()
            .lease_grant(request)
            .await?
            .into_inner()
            .id)
    }

    pub async fn lease_revoke(&self, id: i64) -> Result<(), CallError> {
        self.lease
            .clone()
            .lease_revoke(LeaseRevokeRequest { id })
            .await?;
        Ok(())
    }

    /// Opens the keep-alive stream of lease `id`, renewing it once: the first answer on
    /// it is that renewal's. (etcd answers the call only once a request came, so the first
    /// one goes out with the call.) Each later renewal is a request on `renew`.
    pub async fn lease_keep_alive(&self, id: i64) -> Result<KeepAlive, CallError> {
        let (renew, requests) = mpsc::channel(4);
        renew
            .try_send(LeaseKeepAliveRequest { id })
            .expect("a new channel has room");
        let requests = tokio_stream_of(requests);
        let answers = self
            .lease
            .clone()
            .lease_keep_alive(requests)
            .await?
            .into_inner();
        Ok(KeepAlive { renew, answers })
    }
}

/// A receiver as the request stream tonic sends from.
fn tokio_stream_of(
    mut rx: mpsc::Receiver<LeaseKeepAliveRequest>,
) -> impl futures::Stream<Item = LeaseKeepAliveRequest> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The key just past every key that starts with `prefix`, as etcd's clients compute it:
/// the prefix with its last byte below 0xff incremented (and the bytes after it dropped).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
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
