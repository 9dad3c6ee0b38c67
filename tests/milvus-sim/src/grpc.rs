//! The gRPC `milvus.proto.milvus.MilvusService` subset (docs/milvus-facts.md §4), answering as
//! Milvus's proxy does: failures travel in `common.Status` (merr code and message) with gRPC
//! status OK; only injected faults (`Unavailable`) and failed authentication are gRPC errors.
//!
//! pymilvus's `MilvusClient` calls Connect when it connects, CreateCollection + CreateIndex +
//! DescribeIndex (until Finished) + LoadCollection + GetLoadingProgress (until 100) in
//! `create_collection`, DescribeCollection in `has_collection`/`describe_collection`,
//! ShowPartitions in `list_partitions`, GetVersion in `get_server_version`; all are here.

use std::collections::BTreeMap;

use base64::Engine;
use milvus_proto::common::{
    ImportState, IndexState, KeyValuePair, LoadState, ReplicateConfiguration, ServerInfo, Status,
};
use milvus_proto::milvus::milvus_service_server::MilvusService;
use milvus_proto::milvus::*;
use prost::Message;
use tonic::{Request, Response};

use crate::Protocol;
use crate::catalog::{Collection, DdlOp, NewCollection, db_or_default, decode_schema};
use crate::cluster::{Cluster, CreateImport};
use crate::faults::ApiEffect;
use crate::jobs::{ExternalState, ImportJob};
use crate::merr::{self, MilvusError};
use crate::rbac::{Caller, Required};
use crate::request_log::RequestRecord;

const SERVICE: &str = "/milvus.proto.milvus.MilvusService";

/// The gRPC face of one cluster.
pub struct MilvusGrpc {
    cluster: Cluster,
}

impl MilvusGrpc {
    pub fn new(cluster: Cluster) -> Self {
        MilvusGrpc { cluster }
    }
}

/// A response that carries a `common.Status`.
trait Answer: Default {
    fn code(&self) -> i32;
    fn failed(error: MilvusError) -> Self;
}

impl Answer for Status {
    fn code(&self) -> i32 {
        self.code
    }
    fn failed(error: MilvusError) -> Self {
        error.to_status()
    }
}

macro_rules! answers {
    ($($t:ty),* $(,)?) => {$(
        impl Answer for $t {
            fn code(&self) -> i32 {
                self.status.as_ref().map_or(0, |s| s.code)
            }
            fn failed(error: MilvusError) -> Self {
                Self { status: Some(error.to_status()), ..Default::default() }
            }
        }
    )*};
}

answers!(
    QueryResults,
    BoolResponse,
    DescribeCollectionResponse,
    ShowCollectionsResponse,
    ShowPartitionsResponse,
    GetLoadStateResponse,
    GetLoadingProgressResponse,
    DescribeIndexResponse,
    ImportResponse,
    GetImportStateResponse,
    ListImportTasksResponse,
    GetVersionResponse,
    CheckHealthResponse,
    ConnectResponse,
    ListDatabasesResponse,
    AllocTimestampResponse,
    GetReplicateConfigurationResponse,
);

impl MilvusGrpc {
    /// Injected faults, authentication and the request's privilege, before a handler runs.
    async fn admit<Q: Privileged>(
        &self,
        rpc: &str,
        request: &Request<Q>,
    ) -> Result<Caller, tonic::Status> {
        let route = format!("{SERVICE}/{rpc}");
        match self.cluster.api_effect(Protocol::Grpc) {
            Some(effect @ ApiEffect::Unavailable) => {
                self.cluster
                    .record_request(Protocol::Grpc, &route, None, None, Some(effect));
                return Err(tonic::Status::unavailable(
                    "service unavailable (fault injected by milvus-sim)",
                ));
            }
            Some(ApiEffect::Delay { delay_ms }) => {
                tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            }
            None => {}
        }
        let metadata = |key: &str| request.metadata().get(key).and_then(|v| v.to_str().ok());
        let presented = metadata("authorization").map(|h| {
            base64::engine::general_purpose::STANDARD
                .decode(h.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .unwrap_or_else(|| h.to_owned())
        });
        let Some(caller) = self.cluster.access().authenticate(presented.as_deref()) else {
            self.cluster.record_request(
                Protocol::Grpc,
                &route,
                None,
                Some(merr::code::NEED_AUTHENTICATE),
                None,
            );
            return Err(tonic::Status::unauthenticated(
                "auth check failure, please check username, password or token",
            ));
        };
        if let Some(required) = request.get_ref().required(metadata("dbname").unwrap_or("")) {
            self.authorize(&route, &caller, &required)?;
        }
        Ok(caller)
    }

    fn authorize(
        &self,
        route: &str,
        caller: &Caller,
        required: &Required,
    ) -> Result<(), tonic::Status> {
        self.cluster
            .access()
            .authorize(caller, required)
            .map_err(|denied| {
                self.cluster.record_request(
                    Protocol::Grpc,
                    route,
                    None,
                    Some(merr::code::UNEXPECTED),
                    None,
                );
                tonic::Status::permission_denied(denied.to_string())
            })
    }

    /// Logs the answer, with the job and the collection (`db.name`) it was about, and
    /// returns it.
    fn finish<R: Answer>(
        &self,
        rpc: &str,
        job_id: Option<i64>,
        collection: Option<String>,
        result: Result<R, MilvusError>,
    ) -> Result<Response<R>, tonic::Status> {
        let response = result.unwrap_or_else(R::failed);
        self.cluster.log_request(RequestRecord {
            collection,
            ..RequestRecord::new(
                Protocol::Grpc,
                &format!("{SERVICE}/{rpc}"),
                job_id,
                Some(response.code()),
                None,
            )
        });
        Ok(Response::new(response))
    }

    /// The usual shape of an RPC: admit, run a synchronous handler, log and answer.
    async fn serve<Q: Privileged, R: Answer>(
        &self,
        rpc: &str,
        request: Request<Q>,
        handle: impl FnOnce(&Cluster, Q) -> Result<R, MilvusError>,
    ) -> Result<Response<R>, tonic::Status> {
        self.admit(rpc, &request).await?;
        let collection = about(&request);
        let result = handle(&self.cluster, request.into_inner());
        self.finish(rpc, None, collection, result)
    }
}

fn ok_status(_: crate::catalog::DdlOutcome) -> Status {
    merr::success()
}

fn kv(pairs: &BTreeMap<String, String>) -> Vec<KeyValuePair> {
    pairs
        .iter()
        .map(|(k, v)| KeyValuePair {
            key: k.clone(),
            value: v.clone(),
        })
        .collect()
}

/// DescribeCollection as the proxy answers it: the stored schema without the dynamic `$meta`
/// field (its `describeCollectionTask` skips `IsDynamic` fields; `enable_dynamic_field` tells
/// a client that the collection has one).
fn describe(c: &Collection, db_id: i64) -> DescribeCollectionResponse {
    let mut schema = c.schema.clone();
    schema.fields.retain(|f| !f.is_dynamic);
    DescribeCollectionResponse {
        status: Some(merr::success()),
        schema: Some(schema),
        collection_id: c.id,
        virtual_channel_names: c.virtual_channels.clone(),
        physical_channel_names: c.physical_channels.clone(),
        created_timestamp: c.created_ts,
        created_utc_timestamp: c.created.unix_ms as u64,
        shards_num: c.shards_num,
        consistency_level: c.consistency_level,
        collection_name: c.name.clone(),
        properties: c.properties.clone(),
        db_name: c.db_name.clone(),
        num_partitions: c.partitions.len() as i64,
        db_id,
        update_timestamp: c.created_ts,
        update_timestamp_str: c.created_ts.to_string(),
        ..Default::default()
    }
}

/// GetImportState's view of a job (docs/milvus-facts.md §4.4): Uncommitted and Committing of a
/// manual job map to ImportFailed, as Milvus's `convertToV1` does.
fn import_state(job: &ImportJob, progress: i64, imported: i64) -> GetImportStateResponse {
    let state = match job.external_state() {
        ExternalState::Pending => ImportState::ImportPending,
        ExternalState::Importing => ImportState::ImportStarted,
        ExternalState::Completed => ImportState::ImportCompleted,
        ExternalState::Failed | ExternalState::Uncommitted | ExternalState::Committing => {
            ImportState::ImportFailed
        }
    };
    GetImportStateResponse {
        status: Some(merr::success()),
        state: state as i32,
        row_count: imported,
        infos: vec![
            KeyValuePair {
                key: "failed_reason".into(),
                value: job.reason.clone(),
            },
            KeyValuePair {
                key: "progress_percent".into(),
                value: progress.to_string(),
            },
        ],
        create_ts: job.created.unix_ms / 1000,
        ..Default::default()
    }
}

fn import_state_of(cluster: &Cluster, job: &ImportJob) -> GetImportStateResponse {
    let fraction = cluster.stage_fraction(job);
    import_state(job, job.progress(fraction), job.row_counts(fraction).0)
}

/// What a request needs: its `privilege_ext_obj` in `milvus.proto` (None: not checked), in
/// its `db_name`, else the `dbname` metadata's database.
trait Privileged {
    fn required(&self, header_db: &str) -> Option<Required>;

    /// The collection the request is about, as `db.name`, for the request log.
    fn collection(&self, _header_db: &str) -> Option<String> {
        None
    }
}

/// The collection `request` is about, its database named by the request or its `dbname`
/// metadata.
fn about<Q: Privileged>(request: &Request<Q>) -> Option<String> {
    let header_db = request
        .metadata()
        .get("dbname")
        .and_then(|v| v.to_str().ok());
    request.get_ref().collection(header_db.unwrap_or(""))
}

/// `db.name`, the default database named.
fn qualified(db: &str, collection: &str) -> String {
    format!("{}.{collection}", db_or_default(db))
}

fn db<'a>(own: &'a str, header: &'a str) -> &'a str {
    if own.is_empty() { header } else { own }
}

/// Requests whose privilege is on the database (`Global`, object `*`).
macro_rules! global {
    ($($request:ty => $privilege:literal),* $(,)?) => {$(
        impl Privileged for $request {
            fn required(&self, header_db: &str) -> Option<Required> {
                Some(Required::global($privilege, db(&self.db_name, header_db)))
            }

            fn collection(&self, header_db: &str) -> Option<String> {
                Some(qualified(db(&self.db_name, header_db), &self.collection_name))
            }
        }
    )*};
}

/// Requests whose privilege is on their `collection_name`.
macro_rules! on_collection {
    ($($request:ty => $privilege:literal),* $(,)?) => {$(
        impl Privileged for $request {
            fn required(&self, header_db: &str) -> Option<Required> {
                Some(Required::collection(
                    $privilege,
                    db(&self.db_name, header_db),
                    &self.collection_name,
                ))
            }

            fn collection(&self, header_db: &str) -> Option<String> {
                Some(qualified(db(&self.db_name, header_db), &self.collection_name))
            }
        }
    )*};
}

/// Requests Milvus checks no privilege of (authentication still applies).
macro_rules! unchecked {
    ($($request:ty),* $(,)?) => {$(
        impl Privileged for $request {
            fn required(&self, _: &str) -> Option<Required> {
                None
            }
        }
    )*};
}

global!(
    CreateCollectionRequest => "CreateCollection",
    DropCollectionRequest => "DropCollection",
    DescribeCollectionRequest => "DescribeCollection",
    AlterCollectionRequest => "CreateCollection",
);
on_collection!(
    LoadCollectionRequest => "Load",
    ReleaseCollectionRequest => "Release",
    QueryRequest => "Query",
    CreatePartitionRequest => "CreatePartition",
    HasPartitionRequest => "HasPartition",
    ShowPartitionsRequest => "ShowPartitions",
    GetLoadStateRequest => "GetLoadState",
    GetLoadingProgressRequest => "GetLoadState",
    CreateIndexRequest => "CreateIndex",
    DescribeIndexRequest => "IndexDetail",
    ImportRequest => "Import",
    AddCollectionFieldRequest => "AddCollectionField",
);
unchecked!(
    HasCollectionRequest,
    ShowCollectionsRequest,
    GetImportStateRequest,
    ListImportTasksRequest,
    GetVersionRequest,
    CheckHealthRequest,
    ConnectRequest,
    ListDatabasesRequest,
    AllocTimestampRequest,
);

/// Database requests: the database is the object, the privilege cluster-wide in 3.0.
impl Privileged for CreateDatabaseRequest {
    fn required(&self, _: &str) -> Option<Required> {
        Some(Required::global("CreateDatabase", "*"))
    }
}

impl Privileged for DropDatabaseRequest {
    fn required(&self, _: &str) -> Option<Required> {
        Some(Required::global("DropDatabase", "*"))
    }
}

impl Privileged for UpdateReplicateConfigurationRequest {
    fn required(&self, _: &str) -> Option<Required> {
        Some(Required::cluster("UpdateReplicateConfiguration"))
    }
}

impl Privileged for GetReplicateConfigurationRequest {
    fn required(&self, _: &str) -> Option<Required> {
        Some(Required::cluster("GetReplicateConfiguration"))
    }
}

/// No privilege is known for it; any authenticated caller may ask.
impl Privileged for GetReplicateInfoRequest {
    fn required(&self, _: &str) -> Option<Required> {
        None
    }
}

#[tonic::async_trait]
impl MilvusService for MilvusGrpc {
    async fn create_collection(
        &self,
        request: Request<CreateCollectionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("CreateCollection", request, |cluster, req| {
            cluster
                .create_collection(NewCollection {
                    db: req.db_name,
                    name: req.collection_name,
                    schema: decode_schema(&req.schema)?,
                    shards_num: req.shards_num,
                    consistency_level: req.consistency_level,
                    properties: req.properties,
                    num_partitions: req.num_partitions,
                })
                .map(ok_status)
        })
        .await
    }

    async fn drop_collection(
        &self,
        request: Request<DropCollectionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("DropCollection", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::DropCollection {
                    db: db_or_default(&req.db_name).to_owned(),
                    name: req.collection_name,
                })
                .map(ok_status)
        })
        .await
    }

    async fn alter_collection(
        &self,
        request: Request<AlterCollectionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("AlterCollection", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::AlterCollection {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                    properties: req.properties,
                    delete_keys: req.delete_keys,
                })
                .map(ok_status)
        })
        .await
    }

    async fn add_collection_field(
        &self,
        request: Request<AddCollectionFieldRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("AddCollectionField", request, |cluster, req| {
            let field =
                milvus_proto::schema::FieldSchema::decode(req.schema.as_slice()).map_err(|e| {
                    MilvusError::new(
                        merr::code::PARAMETER_INVALID,
                        format!("failed to unmarshal field schema: {e}"),
                    )
                })?;
            cluster
                .execute_ddl(DdlOp::AddCollectionField {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                    field,
                })
                .map(ok_status)
        })
        .await
    }

    async fn has_collection(
        &self,
        request: Request<HasCollectionRequest>,
    ) -> Result<Response<BoolResponse>, tonic::Status> {
        self.serve("HasCollection", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let db = c.database(&req.db_name)?;
                Ok(BoolResponse {
                    status: Some(merr::success()),
                    value: db.collections.contains_key(&req.collection_name),
                })
            })
        })
        .await
    }

    async fn load_collection(
        &self,
        request: Request<LoadCollectionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("LoadCollection", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::LoadCollection {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                })
                .map(ok_status)
        })
        .await
    }

    async fn release_collection(
        &self,
        request: Request<ReleaseCollectionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("ReleaseCollection", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::ReleaseCollection {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                })
                .map(ok_status)
        })
        .await
    }

    /// The queries a restore's verification sends ([`crate::query`]).
    async fn query(
        &self,
        request: Request<QueryRequest>,
    ) -> Result<Response<QueryResults>, tonic::Status> {
        self.admit("Query", &request).await?;
        let collection = about(&request);
        let result = crate::query::answer(&self.cluster, request.into_inner()).await;
        self.finish("Query", None, collection, result)
    }

    async fn describe_collection(
        &self,
        request: Request<DescribeCollectionRequest>,
    ) -> Result<Response<DescribeCollectionResponse>, tonic::Status> {
        self.serve("DescribeCollection", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let db = c.database(&req.db_name)?;
                let found = if req.collection_name.is_empty() && req.collection_id != 0 {
                    db.collections
                        .values()
                        .find(|coll| coll.id == req.collection_id)
                } else {
                    db.collections.get(&req.collection_name)
                };
                let coll = found.ok_or_else(|| {
                    MilvusError::collection_not_found(&db.name, &req.collection_name)
                })?;
                Ok(describe(coll, db.id))
            })
        })
        .await
    }

    async fn show_collections(
        &self,
        request: Request<ShowCollectionsRequest>,
    ) -> Result<Response<ShowCollectionsResponse>, tonic::Status> {
        self.serve("ShowCollections", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let db = c.database(&req.db_name)?;
                let mut out = ShowCollectionsResponse {
                    status: Some(merr::success()),
                    ..Default::default()
                };
                for coll in db.collections.values() {
                    out.collection_names.push(coll.name.clone());
                    out.collection_ids.push(coll.id);
                    out.created_timestamps.push(coll.created_ts);
                    out.created_utc_timestamps.push(coll.created.unix_ms as u64);
                    out.in_memory_percentages
                        .push(if coll.loaded { 100 } else { 0 });
                    out.query_service_available.push(coll.loaded);
                    out.shards_num.push(coll.shards_num);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn create_partition(
        &self,
        request: Request<CreatePartitionRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("CreatePartition", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::CreatePartition {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                    name: req.partition_name,
                    id: cluster.next_id(),
                })
                .map(ok_status)
        })
        .await
    }

    async fn has_partition(
        &self,
        request: Request<HasPartitionRequest>,
    ) -> Result<Response<BoolResponse>, tonic::Status> {
        self.serve("HasPartition", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let coll = c.collection(&req.db_name, &req.collection_name)?;
                Ok(BoolResponse {
                    status: Some(merr::success()),
                    value: coll.partition(&req.partition_name).is_some(),
                })
            })
        })
        .await
    }

    async fn show_partitions(
        &self,
        request: Request<ShowPartitionsRequest>,
    ) -> Result<Response<ShowPartitionsResponse>, tonic::Status> {
        self.serve("ShowPartitions", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let coll = c.collection(&req.db_name, &req.collection_name)?;
                let mut out = ShowPartitionsResponse {
                    status: Some(merr::success()),
                    ..Default::default()
                };
                for p in &coll.partitions {
                    out.partition_names.push(p.name.clone());
                    out.partition_i_ds.push(p.id);
                    out.created_timestamps
                        .push(crate::tso::from_unix_ms(p.created.unix_ms));
                    out.created_utc_timestamps.push(p.created.unix_ms as u64);
                    out.in_memory_percentages
                        .push(if coll.loaded { 100 } else { 0 });
                }
                Ok(out)
            })
        })
        .await
    }

    async fn get_load_state(
        &self,
        request: Request<GetLoadStateRequest>,
    ) -> Result<Response<GetLoadStateResponse>, tonic::Status> {
        self.serve("GetLoadState", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let coll = c.collection(&req.db_name, &req.collection_name)?;
                let state = if coll.loaded {
                    LoadState::Loaded
                } else {
                    LoadState::NotLoad
                };
                Ok(GetLoadStateResponse {
                    status: Some(merr::success()),
                    state: state as i32,
                })
            })
        })
        .await
    }

    async fn get_loading_progress(
        &self,
        request: Request<GetLoadingProgressRequest>,
    ) -> Result<Response<GetLoadingProgressResponse>, tonic::Status> {
        self.serve("GetLoadingProgress", request, |cluster, req| {
            cluster.with_catalog(|c| {
                let coll = c.collection(&req.db_name, &req.collection_name)?;
                if !coll.loaded {
                    return Err(MilvusError::new(
                        101,
                        format!("collection not loaded[collection={}]", coll.name),
                    ));
                }
                // Loading is instant in the sim: a loaded collection is fully loaded.
                Ok(GetLoadingProgressResponse {
                    status: Some(merr::success()),
                    progress: 100,
                    refresh_progress: 100,
                })
            })
        })
        .await
    }

    async fn create_index(
        &self,
        request: Request<CreateIndexRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("CreateIndex", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::CreateIndex {
                    db: db_or_default(&req.db_name).to_owned(),
                    collection: req.collection_name,
                    field_name: req.field_name,
                    index_name: req.index_name,
                    params: req.extra_params,
                    id: cluster.next_id(),
                })
                .map(ok_status)
        })
        .await
    }

    async fn describe_index(
        &self,
        request: Request<DescribeIndexRequest>,
    ) -> Result<Response<DescribeIndexResponse>, tonic::Status> {
        self.serve("DescribeIndex", request, |cluster, req| {
            let rows = cluster.visible_rows(&req.db_name, &req.collection_name);
            cluster.with_catalog(|c| {
                let coll = c.collection(&req.db_name, &req.collection_name)?;
                let descriptions: Vec<IndexDescription> = coll
                    .indexes
                    .iter()
                    .filter(|i| req.index_name.is_empty() || i.index_name == req.index_name)
                    .filter(|i| req.field_name.is_empty() || i.field_name == req.field_name)
                    .map(|i| IndexDescription {
                        index_name: i.index_name.clone(),
                        index_id: i.id,
                        params: kv(&i.params),
                        field_name: i.field_name.clone(),
                        indexed_rows: rows,
                        total_rows: rows,
                        // Index building is part of each import's IndexBuilding stage.
                        state: IndexState::Finished as i32,
                        ..Default::default()
                    })
                    .collect();
                if descriptions.is_empty() {
                    return Err(MilvusError::index_not_found(&coll.name));
                }
                Ok(DescribeIndexResponse {
                    status: Some(merr::success()),
                    index_descriptions: descriptions,
                })
            })
        })
        .await
    }

    async fn import(
        &self,
        request: Request<ImportRequest>,
    ) -> Result<Response<ImportResponse>, tonic::Status> {
        let caller = self.admit("Import", &request).await?;
        let collection = about(&request);
        let req = request.into_inner();
        let create = CreateImport {
            db_name: req.db_name,
            collection_name: req.collection_name,
            partition_name: req.partition_name,
            // v1 Import wraps ImportV2 with every file in one group (docs/milvus-facts.md §4.4).
            files: if req.files.is_empty() {
                Vec::new()
            } else {
                vec![req.files]
            },
            options: req
                .options
                .into_iter()
                .map(|kv| (kv.key, kv.value))
                .collect(),
            idempotency_key: Some(req.idempotency_key).filter(|k| !k.is_empty()),
            protocol: Protocol::Grpc,
        };
        if self.cluster.requires_import_binlog(&create.options) {
            self.authorize(
                &format!("{SERVICE}/Import"),
                &caller,
                &Required::cluster("ImportBinlog"),
            )?;
        }
        let result = self.cluster.create_import(create);
        let job_id = result.as_ref().ok().copied();
        let result = result.map(|id| ImportResponse {
            status: Some(merr::success()),
            tasks: vec![id],
        });
        self.finish("Import", job_id, collection, result)
    }

    async fn get_import_state(
        &self,
        request: Request<GetImportStateRequest>,
    ) -> Result<Response<GetImportStateResponse>, tonic::Status> {
        self.admit("GetImportState", &request).await?;
        let task = request.into_inner().task;
        let result = self
            .cluster
            .describe_import(&task.to_string())
            .map(|job| import_state_of(&self.cluster, &job));
        self.finish("GetImportState", Some(task), None, result)
    }

    async fn list_import_tasks(
        &self,
        request: Request<ListImportTasksRequest>,
    ) -> Result<Response<ListImportTasksResponse>, tonic::Status> {
        self.serve("ListImportTasks", request, |cluster, req| {
            // Milvus ignores `limit` here (docs/milvus-facts.md §4.4).
            let tasks = cluster.list_imports(&req.db_name, Some(&req.collection_name), |j| {
                import_state_of(cluster, j)
            })?;
            Ok(ListImportTasksResponse {
                status: Some(merr::success()),
                tasks,
            })
        })
        .await
    }

    async fn get_version(
        &self,
        request: Request<GetVersionRequest>,
    ) -> Result<Response<GetVersionResponse>, tonic::Status> {
        self.serve("GetVersion", request, |cluster, _| {
            Ok(GetVersionResponse {
                status: Some(merr::success()),
                version: cluster.build().to_owned(),
            })
        })
        .await
    }

    async fn check_health(
        &self,
        request: Request<CheckHealthRequest>,
    ) -> Result<Response<CheckHealthResponse>, tonic::Status> {
        self.serve("CheckHealth", request, |_, _| {
            Ok(CheckHealthResponse {
                status: Some(merr::success()),
                is_healthy: true,
                reasons: Vec::new(),
            })
        })
        .await
    }

    async fn connect(
        &self,
        request: Request<ConnectRequest>,
    ) -> Result<Response<ConnectResponse>, tonic::Status> {
        self.serve("Connect", request, |cluster, _| {
            Ok(ConnectResponse {
                status: Some(merr::success()),
                server_info: Some(ServerInfo {
                    build_tags: cluster.build().to_owned(),
                    build_time: String::new(),
                    git_commit: String::new(),
                    go_version: "milvus-sim".to_owned(),
                    deploy_mode: "CLUSTER".to_owned(),
                    reserved: Default::default(),
                }),
                identifier: cluster.next_id(),
            })
        })
        .await
    }

    async fn create_database(
        &self,
        request: Request<CreateDatabaseRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("CreateDatabase", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::CreateDatabase {
                    name: req.db_name,
                    id: cluster.next_id(),
                })
                .map(ok_status)
        })
        .await
    }

    async fn drop_database(
        &self,
        request: Request<DropDatabaseRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.serve("DropDatabase", request, |cluster, req| {
            cluster
                .execute_ddl(DdlOp::DropDatabase { name: req.db_name })
                .map(ok_status)
        })
        .await
    }

    async fn list_databases(
        &self,
        request: Request<ListDatabasesRequest>,
    ) -> Result<Response<ListDatabasesResponse>, tonic::Status> {
        self.serve("ListDatabases", request, |cluster, _| {
            cluster.with_catalog(|c| {
                let mut out = ListDatabasesResponse {
                    status: Some(merr::success()),
                    ..Default::default()
                };
                for db in c.databases.values() {
                    out.db_names.push(db.name.clone());
                    out.created_timestamp
                        .push(crate::tso::from_unix_ms(db.created.unix_ms));
                    out.db_ids.push(db.id);
                }
                Ok(out)
            })
        })
        .await
    }

    async fn update_replicate_configuration(
        &self,
        request: Request<UpdateReplicateConfigurationRequest>,
    ) -> Result<Response<Status>, tonic::Status> {
        self.admit("UpdateReplicateConfiguration", &request).await?;
        let result = match request.into_inner().replicate_configuration {
            Some(config) => self
                .cluster
                .update_replicate_configuration(&config)
                .await
                .map(|()| merr::success()),
            None => Err(MilvusError::new(
                merr::code::PARAMETER_INVALID,
                "config cannot be nil: invalid parameter",
            )),
        };
        self.finish("UpdateReplicateConfiguration", None, None, result)
    }

    /// Asked of a secondary. No status field: a secondary of another source, or a cluster
    /// that is no secondary, answers with the checkpoint unset, as Milvus swallows its
    /// replicate-violation error.
    async fn get_replicate_info(
        &self,
        request: Request<GetReplicateInfoRequest>,
    ) -> Result<Response<GetReplicateInfoResponse>, tonic::Status> {
        self.admit("GetReplicateInfo", &request).await?;
        let request = request.into_inner();
        let checkpoint = self
            .cluster
            .replicate_checkpoint(&request.source_cluster_id, &request.target_pchannel);
        self.cluster.record_request(
            Protocol::Grpc,
            &format!("{SERVICE}/GetReplicateInfo"),
            None,
            Some(0),
            None,
        );
        Ok(Response::new(GetReplicateInfoResponse {
            checkpoint,
            salvage_checkpoint: None,
        }))
    }

    /// A hybrid timestamp of now on the cluster's clock: milliseconds shifted left 18 bits,
    /// the clock its commits are stamped with and its replication checkpoints read in.
    async fn alloc_timestamp(
        &self,
        request: Request<AllocTimestampRequest>,
    ) -> Result<Response<AllocTimestampResponse>, tonic::Status> {
        self.serve("AllocTimestamp", request, |cluster, _| {
            Ok(AllocTimestampResponse {
                status: Some(merr::success()),
                timestamp: cluster.clock(),
            })
        })
        .await
    }

    async fn get_replicate_configuration(
        &self,
        request: Request<GetReplicateConfigurationRequest>,
    ) -> Result<Response<GetReplicateConfigurationResponse>, tonic::Status> {
        self.serve("GetReplicateConfiguration", request, |cluster, _| {
            Ok(GetReplicateConfigurationResponse {
                status: Some(merr::success()),
                configuration: Some(
                    cluster
                        .replicate_configuration()
                        .unwrap_or_else(ReplicateConfiguration::default),
                ),
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_import_state_maps_uncommitted_to_failed() {
        let job: ImportJob = serde_json::from_value(serde_json::json!({
            "job_id": "5", "db_name": "default", "collection_name": "c", "collection_id": 1,
            "partition_name": "", "files": [], "options": {},
            "parsed_options": {"commit": "manual", "source": "row_files", "timeout": null,
                "storage_version": "V1", "start_ts": null, "end_ts": null},
            "origin": {"kind": "client", "protocol": "rest"}, "idempotency_key": null,
            "state": "Uncommitted", "reason": "", "history": [],
            "created": {"rfc3339": "2026-01-01T00:00:00Z", "unix_ms": 1_767_225_600_000i64},
            "completed": null, "deadline": null, "total_rows": 3, "imported_rows": 3,
            "deleted_rows": 0, "groups": [], "manifest": [], "state_entered_ms": 0
        }))
        .expect("valid job json");
        let s = import_state(&job, 99, 3);
        assert_eq!(s.state, ImportState::ImportFailed as i32);
        assert_eq!(
            (s.row_count, s.create_ts, s.id, s.collection_id),
            (3, 1_767_225_600, 0, 0)
        );
    }
}
