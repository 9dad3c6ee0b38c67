"""The two-phase recipe of Milvus's "Bulk Import in CDC Replication Mode" guide, run with the
real pymilvus against milvus-sim: a primary and a standby, auto_commit=false, wait for
Uncommitted on both, commit once on the primary, Completed on both; abort through REST; and
MilvusClient's gRPC calls, partition-key and dynamic-field collections included."""

import itertools
import json

import pytest
from pymilvus import DataType, MilvusClient
from pymilvus.exceptions import MilvusException
from pymilvus.bulk_writer import bulk_import, list_import_jobs

_names = itertools.count()


def fresh_collection(sim):
    """A new collection created on the primary and replicated to the standby."""
    name = f"coll_{next(_names)}"
    sim.create_collection(name, dimension=4)
    return name


def rows_file(sim, name, count):
    rows = [{"id": i, "vector": [0.1, 0.2, 0.3, 0.4]} for i in range(count)]
    sim.write_file(name, json.dumps({"rows": rows}))


def create_manual_job(sim, collection, file):
    response = bulk_import(
        url=sim.uris["a"],
        collection_name=collection,
        files=[[file]],
        options={"auto_commit": "false"},
    )
    answer = response.json()
    assert answer["code"] == 0, answer
    return answer["data"]["jobId"]


def test_two_phase_import_commits_once_on_the_primary_and_completes_on_both(sim):
    collection = fresh_collection(sim)
    rows_file(sim, "two_phase/rows.json", 7)
    job_id = create_manual_job(sim, collection, "two_phase/rows.json")
    assert job_id.isdigit() and len(job_id) >= 17

    sim.wait_state(job_id, "Uncommitted")
    for cluster in ("a", "b"):
        data = sim.progress(cluster, job_id)
        assert (data["progress"], data["totalRows"]) == (99, 7)

    assert sim.rest("a", "commit", {"jobId": job_id}) == {"code": 0, "data": {}}
    sim.wait_state(job_id, "Completed")
    for cluster in ("a", "b"):
        data = sim.progress(cluster, job_id)
        assert (data["progress"], data["importedRows"]) == (100, 7)

    jobs = list_import_jobs(url=sim.uris["b"], collection_name=collection).json()
    assert [r["jobId"] for r in jobs["data"]["records"]] == [job_id]


def test_abort_through_rest_fails_the_job_on_both_ends(sim):
    collection = fresh_collection(sim)
    rows_file(sim, "abort/rows.json", 3)
    job_id = create_manual_job(sim, collection, "abort/rows.json")
    sim.wait_state(job_id, "Uncommitted")
    assert sim.rest("a", "abort", {"jobId": job_id})["code"] == 0
    sim.wait_state(job_id, "Failed")
    assert sim.rest("a", "commit", {"jobId": job_id})["code"] != 0


def test_the_standby_refuses_commit_and_create(sim):
    collection = fresh_collection(sim)
    rows_file(sim, "standby/rows.json", 2)
    job_id = create_manual_job(sim, collection, "standby/rows.json")
    sim.wait_state(job_id, "Uncommitted")
    assert sim.rest("b", "commit", {"jobId": job_id})["code"] != 0
    with pytest.raises(MilvusException, match="is not primary"):
        bulk_import(url=sim.uris["b"], collection_name=collection, files=[["standby/rows.json"]],
                    options={"auto_commit": "false"})
    assert sim.progress("b", job_id)["state"] == "Uncommitted"
    assert sim.rest("a", "abort", {"jobId": job_id})["code"] == 0


def test_auto_commit_is_refused_in_a_replicating_cluster(sim):
    collection = fresh_collection(sim)
    # pymilvus raises on a non-zero code; the raw answer is checked through requests.
    with pytest.raises(MilvusException, match="code: 3000"):
        bulk_import(url=sim.uris["a"], collection_name=collection, files=[["x.json"]])
    answer = sim.rest("a", "create", {"collectionName": collection, "files": [["x.json"]]})
    assert answer == {
        "code": 3000,
        "message": "failed to validate import request: auto_commit=true import in replicating cluster"
        " is not supported: unsupported operation",
    }


def test_milvus_client_over_grpc(sim):
    client = MilvusClient(uri=sim.uris["a"])
    assert client.get_server_version() == "3.0.0"
    client.create_collection("grpc_coll", dimension=8)
    assert client.has_collection("grpc_coll")
    assert not client.has_collection("no_such_collection")
    assert client.list_partitions("grpc_coll") == ["_default"]
    described = client.describe_collection("grpc_coll")
    assert described["collection_name"] == "grpc_coll"
    assert [f["name"] for f in described["fields"]] == ["id", "vector"]
    assert described["fields"][1]["params"]["dim"] == 8

    config = client.get_replicate_configuration()
    assert [c.cluster_id for c in config.clusters] == ["a", "b"]
    assert [c.connection_param.uri for c in config.clusters] == [sim.uris["a"], sim.uris["b"]]
    assert all(c.connection_param.token == "" for c in config.clusters)
    assert [(t.source_cluster_id, t.target_cluster_id) for t in config.cross_cluster_topology] == [("a", "b")]
    assert list(config.clusters[1].pchannels) == ["b-rootcoord-dml_0", "b-rootcoord-dml_1"]

    standby = MilvusClient(uri=sim.uris["b"])
    sim.wait_until(lambda: standby.has_collection("grpc_coll"), "grpc_coll on the standby")
    assert standby.describe_collection("grpc_coll")["collection_id"] == described["collection_id"]


def test_milvus_client_partition_key_and_dynamic_field(sim):
    client = MilvusClient(uri=sim.uris["a"])
    schema = MilvusClient.create_schema(enable_dynamic_field=True, partition_key_field="tenant")
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("tenant", DataType.INT64)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=4)
    client.create_collection("keyed", schema=schema)
    assert client.list_partitions("keyed") == [f"_default_{i}" for i in range(16)]
    with pytest.raises(MilvusException, match="disable create partition if partition key mode is used"):
        client.create_partition("keyed", "p1")

    client.create_collection("keyed_four", schema=schema, num_partitions=4)
    assert client.list_partitions("keyed_four") == ["_default_0", "_default_1", "_default_2", "_default_3"]

    # Milvus stores a `$meta` field for the dynamic schema but DescribeCollection hides it.
    described = client.describe_collection("keyed")
    assert described["enable_dynamic_field"] is True
    assert [f["name"] for f in described["fields"]] == ["id", "tenant", "vector"]
    assert [f.get("is_partition_key", False) for f in described["fields"]] == [False, True, False]
    assert (described["num_partitions"], described["num_shards"]) == (16, 1)

    standby = MilvusClient(uri=sim.uris["b"])
    sim.wait_until(lambda: standby.has_collection("keyed_four"), "keyed_four on the standby")
    assert standby.list_partitions("keyed_four") == client.list_partitions("keyed_four")
