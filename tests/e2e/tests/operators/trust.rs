//! What lockstep believes without checking, tried as an attacker with ordinary access would:
//! a job file that describes its own target to take the host's token, and a journal record
//! written into etcd that puts a cluster at the attacker's address. Each one points at a
//! listener the test owns, which must never be contacted.

use std::net::TcpListener;
use std::time::Duration;

use lockstep::journal::etcd::{EtcdJournal, EtcdLocation};
use lockstep::journal::{Journal, RecordedEnd, RestoreId, RestoreRecord, Role};

use crate::support::{TARGET, World, etcd, host_config, world};

/// The variable the world's target now takes its token from, and the token: what an
/// attacker wants sent to them.
const TOKEN_VAR: &str = "LOCKSTEP_TRUST_TARGET_TOKEN";
const TOKEN: &str = "root:trust-planted-token-7c1d";

/// A port of the test's own that counts the connections it was asked for.
struct Trap {
    listener: TcpListener,
}

impl Trap {
    fn new() -> Trap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        listener.set_nonblocking(true).expect("non-blocking");
        Trap { listener }
    }

    fn uri(&self) -> String {
        format!("http://{}", self.listener.local_addr().expect("bound"))
    }

    /// Whether anything connected since the last look.
    fn contacted(&self) -> bool {
        self.listener.accept().is_ok()
    }
}

/// The world with its target's token in [`TOKEN_VAR`].
async fn world_with_a_token() -> World {
    let world = world().await;
    let path = host_config(&world);
    let config = std::fs::read_to_string(&path).expect("the host config");
    let header = format!("[clusters.{TARGET}]\n");
    assert!(config.contains(&header), "{config}");
    std::fs::write(
        &path,
        config.replace(&header, &format!("{header}token_env = \"{TOKEN_VAR}\"\n")),
    )
    .expect("the host config is written");
    world
}

/// A job file describing its own target, with the host's token variable and the host's
/// storage keys: refused before anything is contacted, the attacker's address included, and
/// nothing is written on any end.
#[tokio::test]
async fn a_job_file_cannot_send_the_hosts_token_where_it_likes() {
    let world = world_with_a_token().await;
    let trap = Trap::new();
    let job = world
        .write_job(
            "exfiltrate",
            &format!(
                "backup = \"bak\"\n[target]\nuri = \"{}\"\ntoken_env = \"{TOKEN_VAR}\"\n\
                 storage = {{ url = \"file:///tmp/lockstep-trust-exfiltrate\" }}\n",
                trap.uri()
            ),
        )
        .unwrap();
    let run = world
        .run(&["run", job.to_str().unwrap()], &[(TOKEN_VAR, TOKEN)])
        .await
        .unwrap();
    assert_eq!(run.code, 2, "{}", run.explain());
    assert!(
        run.stdout.contains("target.token_env")
            && run.stdout.contains("a job cannot name credentials"),
        "{}",
        run.explain()
    );
    assert!(!trap.contacted(), "the job's own target was contacted");
    assert!(
        world.writes_received().await.unwrap().is_empty(),
        "a refused job wrote on an end"
    );
}

/// A record planted in the fleet's etcd, unclaimed and unfinished, that names the target by
/// its host config name at the attacker's address: `serve`'s sweep finds it and refuses to
/// act on it, contacting nothing, and the record stays as it was.
#[tokio::test]
async fn a_planted_journal_record_cannot_move_a_cluster() {
    let Some(etcd) = etcd("planted-record").await else {
        return;
    };
    let world = world_with_a_token().await;
    let trap = Trap::new();
    let url = etcd.journal_url("planted-record");
    let journal = EtcdJournal::connect(&EtcdLocation::parse(&url).unwrap())
        .await
        .unwrap();
    let id = RestoreId::new("planted", "abcdef0123456789", 1);
    let planted = RestoreRecord::new(
        id.clone(),
        "planted",
        "abcdef0123456789",
        1,
        "bak",
        vec![RecordedEnd {
            name: TARGET.into(),
            role: Role::Target,
            uri: trap.uri(),
        }],
    );
    {
        let claim = journal.claim(&id).await.unwrap();
        journal.save(claim.as_ref(), &planted).await.unwrap();
    }
    let mut serve = world
        .spawn(
            &["serve", "--listen", "127.0.0.1:0", "--journal", &url],
            &[(TOKEN_VAR, TOKEN)],
        )
        .unwrap();
    serve
        .wait_for_log("puts end t at", 1, Duration::from_secs(30))
        .await
        .unwrap_or_else(|e| panic!("{e}: {}", serve.log()));
    assert!(
        serve.log().contains("where the host config has"),
        "{}",
        serve.log()
    );
    assert!(!trap.contacted(), "the record's address was contacted");
    let kept = journal
        .load(&id)
        .await
        .unwrap()
        .expect("the record is kept");
    assert_eq!(kept.outcome, None, "the planted record was acted on");
    assert_eq!(kept.ends, planted.ends);
    assert!(world.writes_received().await.unwrap().is_empty());
    serve.kill().unwrap();
}
