//! A target reached over TLS: its certificate names only `milvus.test`, so lockstep trusts
//! it through the world's CA and that name, and with mutual TLS presents its own
//! certificate. The secondaries stay on their plain ports, as the target's replication
//! names them.

use e2e::{TargetTls, World, WorldSpec};

fn tls_world(mode: TargetTls) -> WorldSpec {
    WorldSpec {
        target_tls: mode,
        ..WorldSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_reaches_a_mutual_tls_target_by_its_ca_and_name() -> anyhow::Result<()> {
    let world = World::start(tls_world(TargetTls::Mutual)).await?;
    assert!(world.uri(e2e::TARGET).starts_with("https://127.0.0.1:"));
    let job = world.job("tls", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 0, "{}", run.explain());
    assert_eq!(run.outcome(), "succeeded");
    world.assert_every_end_has_the_backup().await?;
    world.assert_nothing_held().await?;
    Ok(())
}

/// Without the client certificate the target asks for, the handshake fails: preflight
/// cannot reach the target, says so by name, and nothing is written anywhere.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_asking_for_a_certificate_is_unreachable_without_one() -> anyhow::Result<()> {
    let world = World::start(tls_world(TargetTls::Mutual)).await?;
    let certs = world.certs.clone().expect("a TLS world has certificates");
    let config = std::fs::read_to_string(world.path("lockstep.toml"))?;
    let without = config.replace(
        &format!(
            ", client_cert = \"{}\", client_key = \"{}\"",
            certs.client_cert.display(),
            certs.client_key.display()
        ),
        "",
    );
    assert_ne!(without, config, "the client certificate was in the config");
    std::fs::write(world.path("lockstep.toml"), without)?;
    let job = world.job("no-cert", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "refused before anything: {}", run.explain());
    // How the client learns of it varies: TLS 1.3 finishes the client's side of the
    // handshake first, so it reads the server's CertificateRequired alert or a cancelled
    // stream, whichever comes first.
    let summary = run.summary();
    assert!(
        summary.contains("t (https://127.0.0.1:")
            && summary.contains("is unreachable")
            && summary.contains("check its URI, its TLS settings"),
        "{}",
        run.explain()
    );
    assert!(world.writes_received().await?.is_empty());
    Ok(())
}

/// A wrong CA: the target's certificate is not trusted, whatever its name.
#[tokio::test(flavor = "multi_thread")]
async fn a_target_whose_certificate_the_ca_did_not_sign_is_not_trusted() -> anyhow::Result<()> {
    let world = World::start(tls_world(TargetTls::Server)).await?;
    let other = e2e::tls::Certs::generate(&world.path("other-ca"))?;
    let certs = world.certs.clone().expect("a TLS world has certificates");
    let config = std::fs::read_to_string(world.path("lockstep.toml"))?;
    std::fs::write(
        world.path("lockstep.toml"),
        config.replace(
            &certs.ca.display().to_string(),
            &other.ca.display().to_string(),
        ),
    )?;
    let job = world.job("wrong-ca", "")?;
    let run = world.run(&["run", job.to_str().unwrap()], &[]).await?;
    assert_eq!(run.code, 2, "{}", run.explain());
    assert!(
        run.summary().contains("invalid peer certificate"),
        "{}",
        run.explain()
    );
    assert!(world.writes_received().await?.is_empty());
    Ok(())
}
