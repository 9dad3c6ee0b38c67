//! Schema DDL against held imports (milvus#53071, docs/milvus-facts.md §2.8): with
//! `import_blocks_schema_ddl`, AddCollectionField and AlterCollection on a collection with an
//! unfinished import job, Uncommitted included, are refused with code 112; DDL that leaves
//! the schema alone is not. Without it (3.0 as released) they go through.

use milvus_proto::common::KeyValuePair;
use milvus_proto::milvus::{AddCollectionFieldRequest, AlterCollectionRequest, CreateIndexRequest};
use milvus_proto::schema::{DataType, FieldSchema};
use milvus_sim::jobs::JobState;
use prost::Message;

use crate::common::*;

fn add_field(name: &str) -> AddCollectionFieldRequest {
    AddCollectionFieldRequest {
        collection_name: "c".into(),
        schema: FieldSchema {
            name: name.into(),
            data_type: DataType::Int64 as i32,
            nullable: true,
            ..Default::default()
        }
        .encode_to_vec(),
        ..Default::default()
    }
}

fn alter(key: &str) -> AlterCollectionRequest {
    AlterCollectionRequest {
        collection_name: "c".into(),
        properties: vec![KeyValuePair {
            key: key.into(),
            value: "1".into(),
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn schema_ddl_is_refused_while_a_job_is_held_when_the_rule_is_on() {
    for refused in [true, false] {
        let topology = if refused {
            star().replace(
                "[[cluster]]\n",
                "[[cluster]]\nimport_blocks_schema_ddl = true\n",
            )
        } else {
            star()
        };
        let (sim, files) = star_with_segment(&topology).await;
        let uri = sim.uri("a");
        let mut client = grpc(&uri).await;
        let rest = Rest::new(&uri);
        let schema = |c: &milvus_sim::Cluster| {
            c.with_catalog(|cat| cat.collection("", "c").expect("there").schema.clone())
        };
        let job = rest.create_manual("c", &files[0]).await;
        wait_for(&sim.cluster("a"), job, JobState::Uncommitted).await;

        let added = client.add_collection_field(add_field("extra")).await;
        let altered = client
            .alter_collection(alter("collection.ttl.seconds"))
            .await;
        let index = CreateIndexRequest {
            collection_name: "c".into(),
            field_name: "vector".into(),
            ..Default::default()
        };
        let indexed = client.create_index(index).await;
        let [added, altered, indexed] =
            [added, altered, indexed].map(|r| r.expect("answers").into_inner());
        assert_eq!(indexed.code, 0, "an index is no schema change: {indexed:?}");
        if refused {
            let message = format!(
                "import job {job} in state Uncommitted is in flight, retry the ddl after it finishes"
            );
            for status in [&added, &altered] {
                assert_eq!(status.code, 112, "{status:?}");
                assert!(status.reason.starts_with(&message), "{}", status.reason);
                assert!(
                    status.reason.ends_with("[collection=c]"),
                    "{}",
                    status.reason
                );
                assert!(!status.retriable);
            }
            assert_eq!(
                schema(&sim.cluster("a")).fields.len(),
                2,
                "nothing was applied"
            );
            // Once the job is terminal, the DDL goes through, and reaches the secondaries.
            assert_eq!(rest.abort(&job.to_string()).await["code"], 0);
            let added = client
                .add_collection_field(add_field("extra"))
                .await
                .expect("answers")
                .into_inner();
            assert_eq!(added.code, 0, "{added:?}");
            let b = sim.cluster("b");
            for _ in 0..2000 {
                if schema(&b).fields.len() == 3 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            assert_eq!(
                schema(&b).fields[2].name,
                "extra",
                "the secondary has it too"
            );
        } else {
            assert_eq!((added.code, altered.code), (0, 0), "{added:?} {altered:?}");
        }
        let fields: Vec<_> = (schema(&sim.cluster("a")).fields.iter())
            .map(|f| (f.name.clone(), f.field_id))
            .collect();
        assert_eq!(fields.last(), Some(&("extra".to_owned(), 102)));
    }
}
