//! Databases, collections, partitions and indexes of one cluster (what rootcoord keeps in
//! etcd). DDL arrives either from a client on a primary/standalone cluster or, on a secondary,
//! from the CDC stream; both apply the same [`DdlOp`], which already carries every id, so a
//! mirrored collection keeps the primary's collection id.

use std::collections::{BTreeMap, HashMap};

use milvus_proto::common::KeyValuePair;
use milvus_proto::schema::{CollectionSchema, DataType, FieldSchema, ValueField, value_field};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::jobs::Stamp;
use crate::merr::{MilvusError, code};
use crate::options::ImportSource;

pub const DEFAULT_DB: &str = "default";
/// `common.defaultPartitionName`: the one partition of a collection without a partition key,
/// and the stem `_default_{i}` of a partition-key collection's partitions.
pub const DEFAULT_PARTITION: &str = "_default";
/// Milvus numbers user fields from 100 (`common.StartOfUserFieldID`).
const START_OF_USER_FIELD_ID: i64 = 100;
/// `common.MetaFieldName`: the JSON field holding a dynamic-schema collection's extra keys.
pub const META_FIELD_NAME: &str = "$meta";
/// `common.DefaultPartitionsWithPartitionKey`: the partitions a partition-key collection gets
/// when CreateCollection sends `num_partitions = 0`.
pub const DEFAULT_PARTITIONS_WITH_PARTITION_KEY: i64 = 16;
/// `rootCoord.maxPartitionNum` default.
const MAX_PARTITION_NUM: i64 = 1024;
/// `common.DefaultShardsNum`: the shards of a collection created with `shards_num = 0`.
const DEFAULT_SHARDS_NUM: i32 = 1;
/// `proxy.maxShardNum` default.
const MAX_SHARD_NUM: i32 = 16;

/// A DDL operation with every id decided, as it is applied and as it is replicated.
#[derive(Debug, Clone)]
pub enum DdlOp {
    CreateDatabase {
        name: String,
        id: i64,
    },
    DropDatabase {
        name: String,
    },
    CreateCollection {
        db: String,
        name: String,
        id: i64,
        /// The partitions the collection starts with: `_default`, or `_default_{i}` for each
        /// of `num_partitions` with a partition key.
        partitions: Vec<NewPartition>,
        /// Field ids already assigned.
        schema: CollectionSchema,
        /// One pchannel per shard, as an index into each cluster's own pchannels: CDC maps a
        /// primary's pchannel i to its secondaries' pchannel i (why replicating clusters have
        /// the same pchannel count), so a mirror's vchannels sit on its own cluster.
        shard_pchannels: Vec<usize>,
        consistency_level: i32,
        properties: Vec<KeyValuePair>,
    },
    DropCollection {
        db: String,
        name: String,
    },
    CreatePartition {
        db: String,
        collection: String,
        name: String,
        id: i64,
    },
    CreateIndex {
        db: String,
        collection: String,
        field_name: String,
        index_name: String,
        params: Vec<KeyValuePair>,
        id: i64,
    },
    LoadCollection {
        db: String,
        collection: String,
    },
    ReleaseCollection {
        db: String,
        collection: String,
    },
    /// Sets `properties` and removes `delete_keys` of a collection's properties.
    AlterCollection {
        db: String,
        collection: String,
        properties: Vec<KeyValuePair>,
        delete_keys: Vec<String>,
    },
    /// Appends a field; its id is the next after the schema's highest, which every cluster
    /// derives alike from the same schema.
    AddCollectionField {
        db: String,
        collection: String,
        field: FieldSchema,
    },
}

impl DdlOp {
    /// The RPC name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            DdlOp::CreateDatabase { .. } => "CreateDatabase",
            DdlOp::DropDatabase { .. } => "DropDatabase",
            DdlOp::CreateCollection { .. } => "CreateCollection",
            DdlOp::DropCollection { .. } => "DropCollection",
            DdlOp::CreatePartition { .. } => "CreatePartition",
            DdlOp::CreateIndex { .. } => "CreateIndex",
            DdlOp::LoadCollection { .. } => "LoadCollection",
            DdlOp::ReleaseCollection { .. } => "ReleaseCollection",
            DdlOp::AlterCollection { .. } => "AlterCollection",
            DdlOp::AddCollectionField { .. } => "AddCollectionField",
        }
    }

    /// The collection (database, name) whose schema this DDL changes: what milvus#53071
    /// refuses while the collection has an unfinished import (docs/milvus-facts.md §2.8).
    pub fn changes_schema_of(&self) -> Option<(&str, &str)> {
        match self {
            DdlOp::AlterCollection { db, collection, .. }
            | DdlOp::AddCollectionField { db, collection, .. } => Some((db, collection)),
            _ => None,
        }
    }
}

/// A partition a new collection starts with, its id decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPartition {
    pub id: i64,
    pub name: String,
}

/// A CreateCollection request once its face decoded it: what the client asked for, before any
/// id is decided. [`NewCollection::into_op`] checks it as Milvus's proxy and rootcoord do.
#[derive(Debug, Clone)]
pub struct NewCollection {
    pub db: String,
    pub name: String,
    /// As the client sent it: ids may be 0, no `$meta` field.
    pub schema: CollectionSchema,
    pub shards_num: i32,
    pub consistency_level: i32,
    pub properties: Vec<KeyValuePair>,
    /// `num_partitions`: only allowed with a partition key; 0 asks for Milvus's default 16.
    pub num_partitions: i64,
}

impl NewCollection {
    /// The smallest collection Milvus accepts, one shard with one Int64 primary key `id`: for
    /// callers that need a collection to import into, not a schema.
    pub fn keyed(db: &str, name: &str) -> NewCollection {
        NewCollection {
            db: db.into(),
            name: name.into(),
            schema: CollectionSchema {
                name: name.into(),
                fields: vec![FieldSchema {
                    field_id: 100,
                    name: "id".into(),
                    is_primary_key: true,
                    data_type: DataType::Int64 as i32,
                    ..Default::default()
                }],
                ..Default::default()
            },
            shards_num: 1,
            consistency_level: 0,
            properties: vec![],
            num_partitions: 0,
        }
    }

    /// Validates the request and decides every id (`next_id` hands them out) and each shard's
    /// pchannel (`next_pchannel` hands out a round-robin counter over the cluster's
    /// `pchannel_count` pchannels), giving the op that is applied on this cluster and
    /// replicated to its secondaries. `preserves_field_ids` says whether this Milvus knows the
    /// `preserve_field_ids` property.
    pub fn into_op(
        self,
        preserves_field_ids: bool,
        pchannel_count: usize,
        mut next_id: impl FnMut() -> i64,
        mut next_pchannel: impl FnMut() -> usize,
    ) -> Result<DdlOp, MilvusError> {
        let shards = shard_count(self.shards_num, pchannel_count)?;
        refuse_explicit_dynamic_field(&self.schema)?;
        let partition_names = initial_partition_names(&self.schema, self.num_partitions)?;
        let preserve = preserves_field_ids
            && (self.properties.iter())
                .any(|kv| kv.key == PRESERVE_FIELD_IDS && kv.value == "true");
        let schema = prepare_schema(self.schema, &self.name, preserve)?;
        Ok(DdlOp::CreateCollection {
            db: db_or_default(&self.db).to_owned(),
            name: self.name,
            id: next_id(),
            partitions: partition_names
                .into_iter()
                .map(|name| NewPartition {
                    id: next_id(),
                    name,
                })
                .collect(),
            schema,
            shard_pchannels: (0..shards)
                .map(|_| next_pchannel() % pchannel_count)
                .collect(),
            consistency_level: self.consistency_level,
            properties: self.properties,
        })
    }
}

/// Whether applying a DDL op changed anything; only changes are replicated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdlOutcome {
    Applied,
    /// A collection was dropped; its active import jobs must fail.
    DroppedCollection(i64),
    /// Milvus answers success for a repeated identical create.
    AlreadyThere,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Database {
    pub id: i64,
    pub name: String,
    pub created: Stamp,
    pub collections: BTreeMap<String, Collection>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Collection {
    pub id: i64,
    pub name: String,
    pub db_name: String,
    /// The schema, encoded, as stored (prost messages are not serde types).
    #[serde(skip)]
    pub schema: CollectionSchema,
    pub shards_num: i32,
    pub consistency_level: i32,
    #[serde(skip)]
    pub properties: Vec<KeyValuePair>,
    /// One per shard, `<pchannel>_<collection id>v<shard>`.
    pub virtual_channels: Vec<String>,
    /// The pchannel of each shard: this cluster's own, chosen round-robin.
    pub physical_channels: Vec<String>,
    pub partitions: Vec<Partition>,
    pub indexes: Vec<Index>,
    pub loaded: bool,
    pub created: Stamp,
    /// Hybrid timestamp of creation (physical ms << 18).
    pub created_ts: u64,
}

impl Collection {
    /// The primary-key field id, else the smallest field id (how the sim counts binlog rows).
    pub fn partition(&self, name: &str) -> Option<&Partition> {
        self.partitions.iter().find(|p| p.name == name)
    }

    /// Partition-key mode: Milvus routes rows to the `_default_{i}` partitions itself.
    pub fn has_partition_key(&self) -> bool {
        self.schema.fields.iter().any(|f| f.is_partition_key)
    }

    /// The proxy's partition rules for an import naming `partition` (empty: none), as
    /// `importTask.PreExecute` applies them: backup and L0 imports name an existing partition;
    /// other imports of a partition-key collection must not name one, since Milvus routes their
    /// rows by key.
    pub fn check_import_partition(
        &self,
        partition: &str,
        source: ImportSource,
    ) -> Result<(), MilvusError> {
        if source == ImportSource::RowFiles && self.has_partition_key() && !partition.is_empty() {
            return Err(MilvusError::import_failed(
                "not allow to set partition name for collection with partition key",
            ));
        }
        if !partition.is_empty() && self.partition(partition).is_none() {
            return Err(MilvusError::partition_not_found(partition));
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Partition {
    pub id: i64,
    pub name: String,
    pub created: Stamp,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Index {
    pub id: i64,
    pub index_name: String,
    pub field_name: String,
    pub params: BTreeMap<String, String>,
}

/// All databases of a cluster. `default` always exists.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Catalog {
    pub databases: BTreeMap<String, Database>,
    /// Collection id → (database, name): jobs and mirrors find collections by id.
    #[serde(skip)]
    by_id: HashMap<i64, (String, String)>,
}

impl Catalog {
    pub fn new(default_db_id: i64) -> Self {
        let mut databases = BTreeMap::new();
        databases.insert(
            DEFAULT_DB.to_owned(),
            Database {
                id: default_db_id,
                name: DEFAULT_DB.to_owned(),
                created: Stamp::now(),
                collections: BTreeMap::new(),
            },
        );
        Catalog {
            databases,
            by_id: HashMap::new(),
        }
    }

    pub fn database(&self, db: &str) -> Result<&Database, MilvusError> {
        self.databases
            .get(db_or_default(db))
            .ok_or_else(|| MilvusError::database_not_found(db_or_default(db)))
    }

    pub fn collection(&self, db: &str, name: &str) -> Result<&Collection, MilvusError> {
        self.database(db)?
            .collections
            .get(name)
            .ok_or_else(|| MilvusError::collection_not_found(db_or_default(db), name))
    }

    fn collection_mut(&mut self, db: &str, name: &str) -> Result<&mut Collection, MilvusError> {
        let db = db_or_default(db);
        self.databases
            .get_mut(db)
            .ok_or_else(|| MilvusError::database_not_found(db))?
            .collections
            .get_mut(name)
            .ok_or_else(|| MilvusError::collection_not_found(db, name))
    }

    pub fn collection_by_id(&self, id: i64) -> Option<&Collection> {
        let (db, name) = self.by_id.get(&id)?;
        self.databases.get(db)?.collections.get(name)
    }

    /// Applies `op`. `pchannels` are this cluster's own, from which vchannels are named.
    pub fn apply(&mut self, op: &DdlOp, pchannels: &[String]) -> Result<DdlOutcome, MilvusError> {
        match op {
            DdlOp::CreateDatabase { name, id } => {
                if self.databases.contains_key(name) {
                    // rootcoord's create_db_task: a plain error, so code 65535.
                    return Err(MilvusError::new(
                        code::UNEXPECTED,
                        format!("database already exist: {name}"),
                    ));
                }
                self.databases.insert(
                    name.clone(),
                    Database {
                        id: *id,
                        name: name.clone(),
                        created: Stamp::now(),
                        collections: BTreeMap::new(),
                    },
                );
                Ok(DdlOutcome::Applied)
            }
            DdlOp::DropDatabase { name } => {
                if name == DEFAULT_DB {
                    return Err(MilvusError::new(
                        code::UNEXPECTED,
                        "can not drop default database",
                    ));
                }
                let Some(database) = self.databases.get(name) else {
                    return Ok(DdlOutcome::AlreadyThere);
                };
                if !database.collections.is_empty() {
                    return Err(MilvusError::new(
                        code::UNEXPECTED,
                        format!(
                            "database:{name} not empty, must drop all collections before drop database"
                        ),
                    ));
                }
                self.databases.remove(name);
                Ok(DdlOutcome::Applied)
            }
            DdlOp::CreateCollection {
                db,
                name,
                id,
                partitions,
                schema,
                shard_pchannels,
                consistency_level,
                properties,
            } => {
                let db_name = db_or_default(db).to_owned();
                let database = self
                    .databases
                    .get_mut(&db_name)
                    .ok_or_else(|| MilvusError::database_not_found(&db_name))?;
                if let Some(existing) = database.collections.get(name) {
                    // Milvus treats an identical re-create as success.
                    return if existing.schema.encode_to_vec() == schema.encode_to_vec() {
                        Ok(DdlOutcome::AlreadyThere)
                    } else {
                        Err(MilvusError::parameter_invalid(
                            "collection schema equal to the existing one",
                            format!(
                                "create duplicate collection with different parameters, collection: {name}"
                            ),
                        ))
                    };
                }
                let physical_channels = shard_pchannels
                    .iter()
                    .map(|&i| {
                        pchannels.get(i).cloned().ok_or_else(|| {
                            MilvusError::new(
                                code::UNEXPECTED,
                                format!(
                                    "pchannel {i} of collection {name} is not among this cluster's {} pchannels",
                                    pchannels.len()
                                ),
                            )
                        })
                    })
                    .collect::<Result<Vec<String>, MilvusError>>()?;
                let virtual_channels = physical_channels
                    .iter()
                    .enumerate()
                    .map(|(shard, pchannel)| format!("{pchannel}_{id}v{shard}"))
                    .collect();
                let now = Stamp::now();
                database.collections.insert(
                    name.clone(),
                    Collection {
                        id: *id,
                        name: name.clone(),
                        db_name: db_name.clone(),
                        schema: schema.clone(),
                        shards_num: shard_pchannels.len() as i32,
                        consistency_level: *consistency_level,
                        properties: properties.clone(),
                        virtual_channels,
                        physical_channels,
                        partitions: partitions
                            .iter()
                            .map(|p| Partition {
                                id: p.id,
                                name: p.name.clone(),
                                created: now,
                            })
                            .collect(),
                        indexes: Vec::new(),
                        loaded: false,
                        created: now,
                        created_ts: crate::tso::now(),
                    },
                );
                self.by_id.insert(*id, (db_name, name.clone()));
                Ok(DdlOutcome::Applied)
            }
            DdlOp::DropCollection { db, name } => {
                let db = db_or_default(db);
                let database = self
                    .databases
                    .get_mut(db)
                    .ok_or_else(|| MilvusError::database_not_found(db))?;
                // Milvus's DropCollection of a missing collection succeeds.
                Ok(match database.collections.remove(name) {
                    Some(dropped) => {
                        self.by_id.remove(&dropped.id);
                        DdlOutcome::DroppedCollection(dropped.id)
                    }
                    None => DdlOutcome::AlreadyThere,
                })
            }
            DdlOp::CreatePartition {
                db,
                collection,
                name,
                id,
            } => {
                let c = self.collection_mut(db, collection)?;
                if c.has_partition_key() {
                    // The proxy's createPartitionTask: a plain error, so code 65535.
                    return Err(MilvusError::new(
                        code::UNEXPECTED,
                        "disable create partition if partition key mode is used",
                    ));
                }
                if c.partition(name).is_some() {
                    return Ok(DdlOutcome::AlreadyThere);
                }
                c.partitions.push(Partition {
                    id: *id,
                    name: name.clone(),
                    created: Stamp::now(),
                });
                Ok(DdlOutcome::Applied)
            }
            DdlOp::CreateIndex {
                db,
                collection,
                field_name,
                index_name,
                params,
                id,
            } => {
                let c = self.collection_mut(db, collection)?;
                if !c.schema.fields.iter().any(|f| &f.name == field_name) {
                    return Err(MilvusError::new(
                        code::PARAMETER_INVALID,
                        format!("cannot create index on non-exist field: {field_name}"),
                    ));
                }
                let params: BTreeMap<String, String> = params
                    .iter()
                    .map(|kv| (kv.key.clone(), kv.value.clone()))
                    .collect();
                let index_name = if index_name.is_empty() {
                    field_name.clone()
                } else {
                    index_name.clone()
                };
                if let Some(existing) = c.indexes.iter().find(|i| i.field_name == *field_name) {
                    return if existing.params == params && existing.index_name == index_name {
                        Ok(DdlOutcome::AlreadyThere)
                    } else {
                        Err(MilvusError::new(
                            code::INDEX_DUPLICATE,
                            format!(
                                "at most one distinct index is allowed per field: index duplicates[indexName={}]",
                                existing.index_name
                            ),
                        ))
                    };
                }
                c.indexes.push(Index {
                    id: *id,
                    index_name,
                    field_name: field_name.clone(),
                    params,
                });
                Ok(DdlOutcome::Applied)
            }
            DdlOp::LoadCollection { db, collection } => {
                let c = self.collection_mut(db, collection)?;
                if c.loaded {
                    return Ok(DdlOutcome::AlreadyThere);
                }
                // Milvus loads a collection only once every vector field has an index.
                if let Some(field) = c.schema.fields.iter().find(|f| {
                    is_vector(f.data_type) && !c.indexes.iter().any(|i| i.field_name == f.name)
                }) {
                    return Err(MilvusError::new(
                        code::INDEX_NOT_FOUND,
                        format!(
                            "there is no vector index on field: [{}], please create index firstly: index not found[collection={}]",
                            field.name, c.name
                        ),
                    ));
                }
                c.loaded = true;
                Ok(DdlOutcome::Applied)
            }
            DdlOp::ReleaseCollection { db, collection } => {
                let c = self.collection_mut(db, collection)?;
                if !c.loaded {
                    return Ok(DdlOutcome::AlreadyThere);
                }
                c.loaded = false;
                Ok(DdlOutcome::Applied)
            }
            DdlOp::AlterCollection {
                db,
                collection,
                properties,
                delete_keys,
            } => {
                let c = self.collection_mut(db, collection)?;
                c.properties.retain(|kv| {
                    !delete_keys.contains(&kv.key) && !properties.iter().any(|p| p.key == kv.key)
                });
                c.properties.extend(properties.iter().cloned());
                Ok(DdlOutcome::Applied)
            }
            DdlOp::AddCollectionField {
                db,
                collection,
                field,
            } => {
                let c = self.collection_mut(db, collection)?;
                // [infer] wording: rootcoord refuses a name the schema has, and a field
                // existing rows would have no value for.
                if c.schema.fields.iter().any(|f| f.name == field.name) {
                    return Err(MilvusError::parameter_invalid(
                        "a new field name",
                        format!("duplicate field name {}", field.name),
                    ));
                }
                if !field.nullable && field.default_value.is_none() {
                    return Err(MilvusError::parameter_invalid(
                        "a nullable field or one with a default value",
                        format!("field {} is neither", field.name),
                    ));
                }
                let id = c
                    .schema
                    .fields
                    .iter()
                    .map(|f| f.field_id)
                    .max()
                    .unwrap_or(0)
                    + 1;
                c.schema.fields.push(FieldSchema {
                    field_id: id,
                    ..field.clone()
                });
                Ok(DdlOutcome::Applied)
            }
        }
    }
}

/// Milvus treats an empty database name as `default`.
pub fn db_or_default(db: &str) -> &str {
    if db.is_empty() { DEFAULT_DB } else { db }
}

/// Decodes the schema bytes of a CreateCollection request.
pub fn decode_schema(bytes: &[u8]) -> Result<CollectionSchema, MilvusError> {
    CollectionSchema::decode(bytes).map_err(|e| {
        MilvusError::new(
            code::PARAMETER_INVALID,
            format!("failed to unmarshal collection schema: {e}"),
        )
    })
}

/// The CreateCollection property that keeps the schema's field ids (Milvus 3.0's
/// `util.PreserveFieldIdsKey`).
const PRESERVE_FIELD_IDS: &str = "preserve_field_ids";

/// Numbers the fields from the first user field id in schema order, whatever ids they came
/// with (rootcoord's `assignFieldAndFunctionID`), or with `preserve` keeps the ids given and
/// numbers only fields without one; appends the dynamic `$meta` field when the schema
/// enables it, as rootcoord does; the schema's name is the collection's.
fn prepare_schema(
    mut schema: CollectionSchema,
    collection_name: &str,
    preserve: bool,
) -> Result<CollectionSchema, MilvusError> {
    if schema.name.is_empty() {
        schema.name = collection_name.to_owned();
    } else if schema.name != collection_name {
        return Err(MilvusError::new(
            code::PARAMETER_INVALID,
            format!(
                "collection name [{collection_name}] not matches schema name [{}]",
                schema.name
            ),
        ));
    }
    if schema.fields.is_empty() {
        return Err(MilvusError::new(105, "schema does not contain any field"));
    }
    if !preserve {
        for (field, id) in schema.fields.iter_mut().zip(START_OF_USER_FIELD_ID..) {
            field.field_id = id;
        }
    }
    let mut next = schema
        .fields
        .iter()
        .map(|f| f.field_id)
        .max()
        .unwrap_or(0)
        .max(START_OF_USER_FIELD_ID - 1)
        + 1;
    for field in &mut schema.fields {
        if field.field_id == 0 {
            field.field_id = next;
            next += 1;
        }
    }
    if schema.enable_dynamic_field {
        schema.fields.push(dynamic_field(next));
    }
    Ok(schema)
}

/// The shards of a new collection: `shards_num`, 1 when 0 is sent, at most the proxy's
/// `maxShardNum` and at most one per pchannel (rootcoord's check against its dml channels).
fn shard_count(shards_num: i32, pchannel_count: usize) -> Result<usize, MilvusError> {
    if shards_num > MAX_SHARD_NUM {
        // The proxy's createCollectionTask: a plain error, so code 65535.
        return Err(MilvusError::new(
            code::UNEXPECTED,
            format!("maximum shards's number should be limited to {MAX_SHARD_NUM}"),
        ));
    }
    // [infer] Milvus leaves a negative count to the channel allocator; the sim reads it as 0.
    let shards = if shards_num <= 0 {
        DEFAULT_SHARDS_NUM
    } else {
        shards_num
    } as usize;
    if shards > pchannel_count {
        return Err(MilvusError::new(
            code::PARAMETER_INVALID,
            format!(
                "shard num ({shards}) exceeds max configuration ({pchannel_count}): invalid parameter"
            ),
        ));
    }
    Ok(shards)
}

/// The proxy's `validateDynamicField`: only Milvus itself adds the dynamic field.
fn refuse_explicit_dynamic_field(schema: &CollectionSchema) -> Result<(), MilvusError> {
    if schema.fields.iter().any(|f| f.is_dynamic) {
        return Err(MilvusError::new(
            code::PARAMETER_INVALID,
            "cannot explicitly set a field as a dynamic field: invalid parameter",
        ));
    }
    Ok(())
}

/// The `$meta` field rootcoord's `appendDynamicField` adds to a schema with
/// `enable_dynamic_field`, numbered after the user fields.
fn dynamic_field(field_id: i64) -> FieldSchema {
    FieldSchema {
        field_id,
        name: META_FIELD_NAME.to_owned(),
        description: "dynamic schema".to_owned(),
        data_type: DataType::Json as i32,
        is_dynamic: true,
        nullable: true,
        default_value: Some(ValueField {
            data: Some(value_field::Data::BytesData(b"{}".to_vec())),
        }),
        ..FieldSchema::default()
    }
}

/// The partitions a new collection starts with, after the proxy's `validatePartitionKey` and
/// rootcoord's `assignPartitionIDs`: `_default` without a partition key; with one,
/// `_default_0` … `_default_{n-1}` for `num_partitions` n (16 when 0 is sent) and no
/// `_default`. Messages are Milvus's; its plain Go errors answer code 65535.
fn initial_partition_names(
    schema: &CollectionSchema,
    num_partitions: i64,
) -> Result<Vec<String>, MilvusError> {
    let plain = |msg: String| MilvusError::new(code::UNEXPECTED, msg);
    let invalid = |msg: String| {
        MilvusError::new(code::PARAMETER_INVALID, format!("{msg}: invalid parameter"))
    };
    let mut key_field: Option<&str> = None;
    for field in schema.fields.iter().filter(|f| f.is_partition_key) {
        if let Some(first) = key_field {
            return Err(plain(format!(
                "there are more than one partition key, field name = {first}, {}",
                field.name
            )));
        }
        if field.is_primary_key {
            return Err(plain(
                "the partition key field must not be primary field".into(),
            ));
        }
        if field.nullable {
            return Err(invalid("partition key field not support nullable".into()));
        }
        if field.data_type != DataType::Int64 as i32 && field.data_type != DataType::VarChar as i32
        {
            return Err(plain(
                "the data type of partition key should be Int64 or VarChar".into(),
            ));
        }
        if num_partitions < 0 {
            return Err(plain(
                "the specified partitions should be greater than 0 if partition key is used".into(),
            ));
        }
        if num_partitions > MAX_PARTITION_NUM {
            return Err(invalid(format!(
                "partition number ({num_partitions}) exceeds max configuration ({MAX_PARTITION_NUM})"
            )));
        }
        key_field = Some(&field.name);
    }
    match key_field {
        None if num_partitions != 0 => Err(plain(
            "num_partitions should only be specified with partition key field enabled".into(),
        )),
        None => Ok(vec![DEFAULT_PARTITION.to_owned()]),
        Some(_) => {
            let n = if num_partitions == 0 {
                DEFAULT_PARTITIONS_WITH_PARTITION_KEY
            } else {
                num_partitions
            };
            Ok((0..n).map(|i| format!("{DEFAULT_PARTITION}_{i}")).collect())
        }
    }
}

/// Whether a `schemapb.DataType` is a vector type: BinaryVector (100) to Int8Vector (105).
fn is_vector(data_type: i32) -> bool {
    (DataType::BinaryVector as i32..=DataType::Int8Vector as i32).contains(&data_type)
}
