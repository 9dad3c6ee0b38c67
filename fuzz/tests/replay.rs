//! Every named seed (fuzz/seeds/TARGET/) runs through its target, and so does whatever a
//! local `cargo fuzz` run kept (fuzz/corpus/TARGET/, fuzz/artifacts/TARGET/; not in git). A
//! panic fails the test and names the file.

use lockstep_fuzz::corpus;

fn replay(name: &str) {
    let run = corpus::target(name);
    let seeds = corpus::files(&corpus::dir("seeds", name));
    // The seeds are committed; an empty directory would make this test pass on nothing.
    assert!(seeds.len() >= 3, "{name}: only {} seeds", seeds.len());
    let local = ["corpus", "artifacts"]
        .into_iter()
        .flat_map(|kind| corpus::files(&corpus::dir(kind, name)));
    for file in seeds.iter().cloned().chain(local) {
        let data = std::fs::read(&file).expect("a readable input");
        assert!(
            !corpus::panics(run, &data),
            "{name} panicked on {}",
            file.display()
        );
    }
}

#[test]
fn job_file_seeds() {
    replay("job_file");
}

#[test]
fn host_config_seeds() {
    replay("host_config");
}

#[test]
fn backup_yaml_seeds() {
    replay("backup_yaml");
}

#[test]
fn rest_body_seeds() {
    replay("rest_body");
}

#[test]
fn backup_meta_seeds() {
    replay("backup_meta");
}

#[test]
fn topology_seeds() {
    replay("topology");
}

#[test]
fn binlog_seeds() {
    replay("binlog");
}
