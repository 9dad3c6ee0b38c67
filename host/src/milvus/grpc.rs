//! The gRPC MilvusService subset lockstep uses: version, replication topology and DDL on the
//! target, and the v1 `Import` of the `per_seg` strategy (docs/milvus-facts.md §3–4).
//!
//! A `common.Status` with a non-zero `code` is an error; transport failures (the end is away
//! or restarting) are [`Error::Unreachable`] so the caller's retry applies.

use base64::Engine as _;
use hyper_util::client::legacy::connect::HttpConnector;
use milvus_formats::value::{self, Value};
use milvus_proto::common::{ImportState, KeyValuePair, ReplicateConfiguration, Status};
use milvus_proto::milvus::milvus_service_client::MilvusServiceClient;
use milvus_proto::milvus::*;
use milvus_proto::schema::{CollectionSchema, FieldData};
use prost::Message;
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use super::{CONNECT_TIMEOUT, Error, REQUEST_TIMEOUT, Result, ServerVersion, Tls};

/// Adds Milvus's `authorization` metadata (base64 of the token or `user:password`).
#[derive(Clone)]
struct Auth(Option<tonic::metadata::AsciiMetadataValue>);

impl Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            req.metadata_mut().insert("authorization", v.clone());
        }
        Ok(req)
    }
}

/// What a secondary says of its replication from one pchannel of its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicateProgress {
    /// The server has no `GetReplicateInfo` (older than CDC in streaming mode).
    Unsupported,
    /// No checkpoint: the end does not replicate from that source.
    NotReplicating,
    /// The time tick (hybrid timestamp) up to which it has applied the source's messages.
    At(u64),
}

/// A client for one end's gRPC MilvusService.
#[derive(Clone)]
pub struct GrpcClient {
    end: String,
    uri: String,
    /// What a call that must not leave after a deadline connects with, anew each time.
    endpoint: Endpoint,
    auth: Auth,
    inner: MilvusServiceClient<InterceptedService<Channel, Auth>>,
}

/// What DescribeCollection tells lockstep about an existing collection.
#[derive(Debug, Clone)]
pub struct CollectionInfo {
    pub id: i64,
    pub schema: CollectionSchema,
    pub physical_channels: Vec<String>,
    pub shards_num: i32,
}

/// One index to create: the field, the index name and its params (`index_type`,
/// `metric_type`, `params`...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    pub field_name: String,
    pub index_name: String,
    pub params: Vec<(String, String)>,
}

/// A v1 import task's state, as `GetImportState` reports it (docs/milvus-facts.md §4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1ImportState {
    pub state: ImportState,
    pub row_count: i64,
    pub reason: Option<String>,
}

impl GrpcClient {
    /// Builds a client that connects on first use, so an unreachable end shows up as an
    /// error on the first call (preflight's `GetVersion`), not at construction.
    pub fn new(end: &str, uri: &str, token: Option<&str>, tls: &Tls) -> Result<GrpcClient> {
        let unusable = |e: tonic::transport::Error| Error::Unreachable {
            end: end.to_string(),
            uri: uri.to_string(),
            source: Box::new(e),
        };
        let mut endpoint = Endpoint::from_shared(uri.to_string())
            .map_err(unusable)?
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        if uri.starts_with("https://") {
            endpoint = endpoint.tls_config(tls.tonic_config()).map_err(unusable)?;
        }
        let auth = match token {
            Some(t) => {
                let encoded = base64::engine::general_purpose::STANDARD.encode(t.as_bytes());
                Some(encoded.parse().map_err(|_| Error::Protocol {
                    end: end.to_string(),
                    call: "auth".into(),
                    detail: "token is not valid metadata".into(),
                })?)
            }
            None => None,
        };
        let auth = Auth(auth);
        let inner = MilvusServiceClient::with_interceptor(endpoint.connect_lazy(), auth.clone());
        Ok(GrpcClient {
            end: end.to_string(),
            uri: uri.to_string(),
            endpoint,
            auth,
            inner,
        })
    }

    pub async fn version(&self) -> Result<ServerVersion> {
        let resp = self
            .call(
                "GetVersion",
                self.inner.clone().get_version(GetVersionRequest {}),
            )
            .await?;
        self.check("GetVersion", resp.status)?;
        Ok(ServerVersion::parse(&resp.version))
    }

    /// The end's replication configuration; `None` when it has none or does not implement the
    /// RPC at all (a Milvus without CDC support answers UNIMPLEMENTED).
    pub async fn replicate_configuration(&self) -> Result<Option<ReplicateConfiguration>> {
        let mut client = self.inner.clone();
        match client
            .get_replicate_configuration(GetReplicateConfigurationRequest {})
            .await
        {
            Ok(resp) => {
                let resp = resp.into_inner();
                self.check("GetReplicateConfiguration", resp.status)?;
                Ok(resp.configuration)
            }
            Err(status) if status.code() == tonic::Code::Unimplemented => Ok(None),
            Err(status) => Err(self.transport("GetReplicateConfiguration", status)),
        }
    }

    /// `GetReplicateInfo` asked of this end (a secondary): how far its replication from
    /// cluster `source` has come on the source's pchannel `pchannel`.
    pub async fn replicate_progress(
        &self,
        source: &str,
        pchannel: &str,
    ) -> Result<ReplicateProgress> {
        let request = GetReplicateInfoRequest {
            source_cluster_id: source.to_owned(),
            target_pchannel: pchannel.to_owned(),
        };
        match self.inner.clone().get_replicate_info(request).await {
            // The answer has no status: a cluster that is no secondary of `source` leaves the
            // checkpoint unset rather than failing.
            Ok(resp) => Ok(match resp.into_inner().checkpoint {
                Some(c) => ReplicateProgress::At(c.time_tick),
                None => ReplicateProgress::NotReplicating,
            }),
            Err(status) if status.code() == tonic::Code::Unimplemented => {
                Ok(ReplicateProgress::Unsupported)
            }
            Err(status) => Err(self.transport("GetReplicateInfo", status)),
        }
    }

    /// `AllocTimestamp`: a hybrid timestamp the end allocates now, from the clock its WAL's
    /// time ticks (and so its secondaries' checkpoints) are read in.
    pub async fn alloc_timestamp(&self) -> Result<u64> {
        let request = AllocTimestampRequest { base: None };
        let resp = self
            .call(
                "AllocTimestamp",
                self.inner.clone().alloc_timestamp(request),
            )
            .await?;
        self.check("AllocTimestamp", resp.status)?;
        Ok(resp.timestamp)
    }

    pub async fn list_databases(&self) -> Result<Vec<String>> {
        let resp = self
            .call(
                "ListDatabases",
                self.inner
                    .clone()
                    .list_databases(ListDatabasesRequest { base: None }),
            )
            .await?;
        self.check("ListDatabases", resp.status)?;
        Ok(resp.db_names)
    }

    pub async fn create_database(&self, db: &str) -> Result<()> {
        let req = CreateDatabaseRequest {
            base: None,
            db_name: db.into(),
            properties: vec![],
        };
        let status = self
            .call("CreateDatabase", self.inner.clone().create_database(req))
            .await?;
        self.check("CreateDatabase", Some(status))
    }

    pub async fn has_collection(&self, db: &str, name: &str) -> Result<bool> {
        let req = HasCollectionRequest {
            base: None,
            db_name: db.into(),
            collection_name: name.into(),
            time_stamp: 0,
        };
        let resp = self
            .call("HasCollection", self.inner.clone().has_collection(req))
            .await?;
        self.check("HasCollection", resp.status)?;
        Ok(resp.value)
    }

    pub async fn describe_collection(&self, db: &str, name: &str) -> Result<CollectionInfo> {
        let req = DescribeCollectionRequest {
            base: None,
            db_name: db.into(),
            collection_name: name.into(),
            collection_id: 0,
            time_stamp: 0,
        };
        let resp = self
            .call(
                "DescribeCollection",
                self.inner.clone().describe_collection(req),
            )
            .await?;
        self.check("DescribeCollection", resp.status)?;
        Ok(CollectionInfo {
            id: resp.collection_id,
            schema: resp.schema.unwrap_or_default(),
            physical_channels: resp.physical_channel_names,
            shards_num: resp.shards_num,
        })
    }

    /// Creates a collection from a schema. `num_partitions` matters only with a partition key.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_collection(
        &self,
        db: &str,
        name: &str,
        schema: &CollectionSchema,
        shards_num: i32,
        consistency_level: i32,
        properties: Vec<(String, String)>,
        num_partitions: i64,
    ) -> Result<()> {
        let req = CreateCollectionRequest {
            base: None,
            db_name: db.into(),
            collection_name: name.into(),
            schema: schema.encode_to_vec(),
            shards_num,
            consistency_level,
            properties: kv(properties),
            num_partitions,
        };
        let status = self
            .call(
                "CreateCollection",
                self.inner.clone().create_collection(req),
            )
            .await?;
        self.check("CreateCollection", Some(status))
    }

    /// Drops `db.name`; with `send_by`, on a connection of its own that writes nothing after
    /// it (`gate.rs`): a drop by name cannot be made conditional at the server, so the one
    /// a fence check allowed must not leave after that check stopped counting.
    pub async fn drop_collection(
        &self,
        db: &str,
        name: &str,
        send_by: Option<std::time::Instant>,
    ) -> Result<()> {
        let req = DropCollectionRequest {
            base: None,
            db_name: db.into(),
            collection_name: name.into(),
        };
        let mut client = match send_by {
            None => self.inner.clone(),
            Some(until) => {
                let mut http = HttpConnector::new();
                http.enforce_http(false);
                http.set_nodelay(true);
                let gated = super::gate::Gated { inner: http, until };
                let channel = self.endpoint.connect_with_connector_lazy(gated);
                MilvusServiceClient::with_interceptor(channel, self.auth.clone())
            }
        };
        let status = self
            .call("DropCollection", client.drop_collection(req))
            .await?;
        self.check("DropCollection", Some(status))
    }

    pub async fn has_partition(&self, db: &str, collection: &str, partition: &str) -> Result<bool> {
        let req = HasPartitionRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
            partition_name: partition.into(),
        };
        let resp = self
            .call("HasPartition", self.inner.clone().has_partition(req))
            .await?;
        self.check("HasPartition", resp.status)?;
        Ok(resp.value)
    }

    pub async fn create_partition(
        &self,
        db: &str,
        collection: &str,
        partition: &str,
    ) -> Result<()> {
        let req = CreatePartitionRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
            partition_name: partition.into(),
        };
        let status = self
            .call("CreatePartition", self.inner.clone().create_partition(req))
            .await?;
        self.check("CreatePartition", Some(status))
    }

    pub async fn show_partitions(&self, db: &str, collection: &str) -> Result<Vec<String>> {
        let req = ShowPartitionsRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
            collection_id: 0,
            partition_names: vec![],
            r#type: 0,
        };
        let resp = self
            .call("ShowPartitions", self.inner.clone().show_partitions(req))
            .await?;
        self.check("ShowPartitions", resp.status)?;
        Ok(resp.partition_names)
    }

    pub async fn create_index(&self, db: &str, collection: &str, index: &IndexSpec) -> Result<()> {
        let req = CreateIndexRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
            field_name: index.field_name.clone(),
            extra_params: kv(index.params.clone()),
            index_name: index.index_name.clone(),
        };
        let status = self
            .call("CreateIndex", self.inner.clone().create_index(req))
            .await?;
        self.check("CreateIndex", Some(status))
    }

    /// The names of the collection's indexes; none (code 700) is an empty list.
    pub async fn index_names(&self, db: &str, collection: &str) -> Result<Vec<String>> {
        let req = DescribeIndexRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
            field_name: String::new(),
            index_name: String::new(),
            timestamp: 0,
        };
        let resp = self
            .call("DescribeIndex", self.inner.clone().describe_index(req))
            .await?;
        if resp.status.as_ref().is_some_and(|s| s.code == 700) {
            return Ok(Vec::new());
        }
        self.check("DescribeIndex", resp.status)?;
        Ok(resp
            .index_descriptions
            .into_iter()
            .map(|d| d.index_name)
            .collect())
    }

    /// A v1 import (the `per_seg` strategy): auto-commit, every file in one group.
    pub async fn import_v1(
        &self,
        db: &str,
        collection: &str,
        partition: &str,
        files: Vec<String>,
        options: Vec<(String, String)>,
    ) -> Result<i64> {
        let req = ImportRequest {
            collection_name: collection.into(),
            partition_name: partition.into(),
            channel_names: vec![],
            row_based: false,
            files,
            options: kv(options),
            db_name: db.into(),
            clustering_info: vec![],
            idempotency_key: String::new(),
        };
        let resp = self.call("Import", self.inner.clone().import(req)).await?;
        self.check("Import", resp.status)?;
        resp.tasks.first().copied().ok_or_else(|| Error::Protocol {
            end: self.end.clone(),
            call: "Import".into(),
            detail: "no task id in the answer".into(),
        })
    }

    pub async fn import_state(&self, task: i64) -> Result<V1ImportState> {
        let resp = self
            .call(
                "GetImportState",
                self.inner
                    .clone()
                    .get_import_state(GetImportStateRequest { task }),
            )
            .await?;
        self.check("GetImportState", resp.status)?;
        let reason = resp
            .infos
            .iter()
            .find(|kv| kv.key == "failed_reason")
            .map(|kv| kv.value.clone())
            .filter(|r| !r.is_empty());
        Ok(V1ImportState {
            state: ImportState::try_from(resp.state).unwrap_or(ImportState::ImportFailed),
            row_count: resp.row_count,
            reason,
        })
    }

    pub async fn load_collection(&self, db: &str, collection: &str) -> Result<()> {
        let req = LoadCollectionRequest {
            db_name: db.into(),
            collection_name: collection.into(),
            ..Default::default()
        };
        let status = self
            .call("LoadCollection", self.inner.clone().load_collection(req))
            .await?;
        self.check("LoadCollection", Some(status))
    }

    pub async fn release_collection(&self, db: &str, collection: &str) -> Result<()> {
        let req = ReleaseCollectionRequest {
            base: None,
            db_name: db.into(),
            collection_name: collection.into(),
        };
        let status = self
            .call(
                "ReleaseCollection",
                self.inner.clone().release_collection(req),
            )
            .await?;
        self.check("ReleaseCollection", Some(status))
    }

    /// Whether the collection is loaded (`GetLoadState` says Loaded).
    pub async fn is_loaded(&self, db: &str, collection: &str) -> Result<bool> {
        let req = GetLoadStateRequest {
            db_name: db.into(),
            collection_name: collection.into(),
            ..Default::default()
        };
        let resp = self
            .call("GetLoadState", self.inner.clone().get_load_state(req))
            .await?;
        self.check("GetLoadState", resp.status)?;
        Ok(resp.state == milvus_proto::common::LoadState::Loaded as i32)
    }

    /// `count(*)` of the collection, or of `partitions` when some are named, with strong
    /// consistency: every write the end has accepted is counted.
    pub async fn count_rows(
        &self,
        db: &str,
        collection: &str,
        partitions: &[String],
    ) -> Result<i64> {
        let answer = self
            .query(db, collection, partitions, "", &["count(*)".into()])
            .await?;
        (answer.iter().find(|f| f.field_name == "count(*)"))
            .and_then(|f| value::from_field_data(f).ok())
            .and_then(|values| match values.first() {
                Some(Value::Int(n)) => Some(*n),
                _ => None,
            })
            .ok_or_else(|| Error::Protocol {
                end: self.end.clone(),
                call: "Query".into(),
                detail: "the answer to count(*) holds no count".into(),
            })
    }

    /// The `output_fields` of the rows `expr` selects, with strong consistency, one
    /// `FieldData` per field.
    pub async fn query(
        &self,
        db: &str,
        collection: &str,
        partitions: &[String],
        expr: &str,
        output_fields: &[String],
    ) -> Result<Vec<FieldData>> {
        let req = QueryRequest {
            db_name: db.into(),
            collection_name: collection.into(),
            expr: expr.into(),
            output_fields: output_fields.to_vec(),
            partition_names: partitions.to_vec(),
            consistency_level: milvus_proto::common::ConsistencyLevel::Strong as i32,
            ..Default::default()
        };
        let resp = self.call("Query", self.inner.clone().query(req)).await?;
        self.check("Query", resp.status)?;
        Ok(resp.fields_data)
    }

    async fn call<T>(
        &self,
        name: &str,
        fut: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T> {
        fut.await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.transport(name, s))
    }

    fn check(&self, call: &str, status: Option<Status>) -> Result<()> {
        match status {
            Some(s) if s.code != 0 || s.error_code != 0 => Err(Error::Api {
                end: self.end.clone(),
                call: call.to_string(),
                // Old servers set only the deprecated error_code; report it then.
                code: if s.code != 0 { s.code } else { s.error_code },
                message: s.reason,
            }),
            _ => Ok(()),
        }
    }

    fn transport(&self, call: &str, status: tonic::Status) -> Error {
        use tonic::Code;
        match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                Error::Unreachable {
                    end: self.end.clone(),
                    uri: self.uri.clone(),
                    source: Box::new(status),
                }
            }
            _ => Error::Protocol {
                end: self.end.clone(),
                call: call.to_string(),
                detail: format!("{:?}: {}", status.code(), status.message()),
            },
        }
    }
}

fn kv(pairs: Vec<(String, String)>) -> Vec<KeyValuePair> {
    pairs
        .into_iter()
        .map(|(key, value)| KeyValuePair { key, value })
        .collect()
}
