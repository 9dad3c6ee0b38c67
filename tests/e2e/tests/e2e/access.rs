//! Ends that check Milvus's privileges: a restore into a database other than `default`, as a
//! user granted exactly what a restore there needs and nothing in `default`. Milvus 3.0 checks
//! describe, get_progress, commit and abort against the database the `DB-Name` header names
//! (their body has no `dbName`), so this restore succeeds only because lockstep sends it.

use e2e::{RESTORER, World, WorldSpec};
use milvus_sim::catalog::DdlOp;
use milvus_sim::rbac::{Grant, ObjectType};

use crate::invariants::{commits_followed_every_uncommitted, nothing_restored_eventually};

const DB: &str = "db_1";

/// What a restore into `DB` needs, less `without`: reading the replication topology and
/// binlog imports on the cluster; creating and dropping (on a rollback) collections in `DB`;
/// partitions and imports on its collections.
fn grants(without: &str) -> Vec<Grant> {
    let grant = |privilege: &str, object, db: &str| Grant {
        privilege: privilege.into(),
        object,
        db: db.into(),
        name: "*".into(),
    };
    [
        grant("GetReplicateConfiguration", ObjectType::Global, "*"),
        grant("ImportBinlog", ObjectType::Global, "*"),
        grant("CreateCollection", ObjectType::Global, DB),
        grant("DropCollection", ObjectType::Global, DB),
        grant("CreatePartition", ObjectType::Collection, DB),
        grant("ShowPartitions", ObjectType::Collection, DB),
        grant("Import", ObjectType::Collection, DB),
    ]
    .into_iter()
    .filter(|g| g.privilege != without)
    .collect()
}

/// A world whose ends check privileges, with `DB` created on the target (and replicated).
async fn world(without: &str) -> anyhow::Result<World> {
    let world = World::start(WorldSpec {
        restorer_grants: Some(grants(without)),
        ..WorldSpec::default()
    })
    .await?;
    let target = world.sim.cluster(e2e::TARGET);
    target
        .execute_ddl(DdlOp::CreateDatabase {
            name: DB.into(),
            id: target.next_id(),
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(world)
}

fn job(world: &World, name: &str) -> anyhow::Result<std::path::PathBuf> {
    world.job(
        name,
        &format!("[restore]\nrename = [\"default.*:{DB}.*\"]\n"),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_user_granted_what_a_restore_needs_restores_into_its_database() -> anyhow::Result<()> {
    let world = world("").await?;
    let job = job(&world, "granted")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");
    commits_followed_every_uncommitted(&world).await?;
    let expected = world.rows_after_deletes();
    for end in world.ends() {
        let visible = world.visible(&end).await?;
        assert!(
            visible.keys().all(|c| c.starts_with(&format!("{DB}."))),
            "{end}: {visible:?}"
        );
        assert_eq!(visible.values().sum::<i64>(), expected, "{end}");
    }
    Ok(())
}

/// The controls: without any one of the grants, the restore stops by Milvus's own words
/// naming the privilege it lacks, and rolls back. (`DropCollection` is what that rollback
/// needs, so it stays.)
#[tokio::test(flavor = "multi_thread")]
async fn without_any_one_grant_the_restore_stops_naming_the_privilege() -> anyhow::Result<()> {
    for lacking in grants("")
        .iter()
        .map(|g| g.privilege.clone())
        .filter(|p| p != "DropCollection")
    {
        let world = world(&lacking).await?;
        let job = job(&world, "lacking")?;
        let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
        assert_ne!(run.code, 0, "{lacking}: {}", run.explain());
        let text = format!("{}\n{}", run.stdout, run.stderr);
        assert!(
            text.contains(&format!(
                "Privilege{lacking}: permission deny to {}",
                RESTORER.0
            )),
            "{lacking}: {}",
            run.explain()
        );
        nothing_restored_eventually(&world).await?;
    }
    Ok(())
}

/// The database in a denial is the one lockstep named: `Import` is checked in `DB`.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_without_import_is_stopped_in_the_database_it_restores_into() -> anyhow::Result<()> {
    let world = world("Import").await?;
    let job = job(&world, "no-import")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 1, "{}", run.explain());
    let summary = run.summary();
    assert!(
        summary.contains(&format!(
            "HTTP 403: rpc error: code = PermissionDenied desc = PrivilegeImport: permission deny to {} in the `{DB}` database",
            RESTORER.0
        )),
        "{summary}"
    );
    nothing_restored_eventually(&world).await
}
