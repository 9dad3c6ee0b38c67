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

#[test]
fn column_group_seeds() {
    replay("column_group");
}

/// The column-group seeds are files the reader reads, so that mutating them reaches pages,
/// not only the footer check: the segment's keys and timestamps, the VarChar keys, the
/// delta log's deletes.
#[test]
fn column_group_seeds_read() {
    use milvus_formats::column_group;
    let seed = |name: &str| {
        std::fs::read(lockstep_fuzz::corpus::dir("seeds", "column_group").join(name)).unwrap()
    };
    let segment = seed("pyarrow-int64-pk-float-vector");
    assert_eq!(column_group::field_ids(&segment), Ok(vec![0, 1, 100, 101]));
    let keys = column_group::pks(&segment, 100).unwrap().unwrap();
    assert_eq!(keys.len(), 20);
    assert_eq!(
        column_group::int64s(&segment, 1).unwrap().map(|t| t.len()),
        Some(20)
    );
    let varchar = seed("pyarrow-varchar-pk");
    assert_eq!(
        column_group::pks(&varchar, 100).unwrap().map(|k| k.len()),
        Some(20)
    );
    let delta = seed("pyarrow-delta");
    assert_eq!(column_group::deletes(&delta).map(|d| d.len()), Ok(3));
}
