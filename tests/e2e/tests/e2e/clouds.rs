//! Backups in the other clouds' stores: an `az://` container on Azurite, named in a
//! `lockstep.toml` with its account and the variable holding the account's key. lockstep
//! reads the backup there and stages it into each end's own storage.

use e2e::clouds::{AZURITE_ACCOUNT, AZURITE_KEY, Azure, copy_all};
use e2e::{World, WorldSpec};

const KEY_VAR: &str = "LOCKSTEP_E2E_AZURE_KEY";

#[tokio::test(flavor = "multi_thread")]
async fn a_backup_in_an_azure_container_restores_on_every_end() -> anyhow::Result<()> {
    let test = "clouds::a_backup_in_an_azure_container_restores_on_every_end";
    let world = World::start(WorldSpec::default()).await?;
    let Some(azure) = Azure::new_container(test).await? else {
        return Ok(());
    };
    let copied = copy_all(&*world.backup_store()?, &*azure.store).await?;
    assert!(copied > 0, "the backup has objects");
    let config = std::fs::read_to_string(world.path("lockstep.toml"))?;
    let (head, tail) = config
        .split_once("[backups]\nstorage = ")
        .expect("the host config has [backups]");
    let (_, tail) = tail.split_once('\n').expect("the storage line ends");
    std::fs::write(
        world.path("lockstep.toml"),
        format!(
            "{head}[backups]\nstorage = {{ url = \"az://{}\", endpoint = \"{}\", allow_http = true, \
             azure_account = \"{AZURITE_ACCOUNT}\", azure_key_env = \"{KEY_VAR}\" }}\n{tail}",
            azure.container, azure.endpoint
        ),
    )?;
    let job = world.job("azure", "")?;
    let run = world
        .run(&["run", job.to_str().unwrap()], &[(KEY_VAR, AZURITE_KEY)])
        .await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    world.assert_every_end_has_the_backup().await?;
    world.assert_nothing_held().await?;

    // Without the key's variable the job is refused before anything is written.
    let again = world.job("azure-no-key", "[restore]\nsuffix = \"_again\"\n")?;
    let refused = world.run(&["run", again.to_str().unwrap()], &[]).await?;
    assert_eq!(refused.code, 2, "{}", refused.explain());
    assert!(
        refused
            .stdout
            .contains(&format!("environment variable {KEY_VAR}")),
        "the refusal names the variable: {}",
        refused.explain()
    );
    Ok(())
}
