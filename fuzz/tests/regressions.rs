//! Each crash libFuzzer has found, kept after its fix under a name that says what it broke.

use lockstep_fuzz::corpus;

fn holds(target: &str, name: &str) {
    let path = corpus::dir("regressions", target).join(name);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        !corpus::panics(corpus::target(target), &data),
        "{target} panicked on {}",
        path.display()
    );
}

/// An empty body is refused at line 1, column 1, not past the end of a line it does not have.
#[test]
fn rest_body_empty() {
    holds("rest_body", "empty-body");
}

/// A body that is JSON but not an object is refused at its value.
#[test]
fn rest_body_number_not_object() {
    holds("rest_body", "number-not-object");
}

/// An empty key and misspelled fields are each refused at a key the body has.
#[test]
fn rest_body_empty_key_and_misspelled_fields() {
    holds("rest_body", "empty-key-and-misspelled-fields");
}

/// The level layout with a partition file cut mid-string and a collection whose name differs
/// from its schema's.
#[test]
fn backup_meta_levels_garbled_partition_file() {
    holds("backup_meta", "levels-garbled-partition-file");
}

/// A full meta with two segments spliced into one object.
#[test]
fn backup_meta_full_meta_spliced_segments() {
    holds("backup_meta", "full-meta-spliced-segments");
}

/// Every file under regressions/ has a test above, so a new crash is not kept unnamed.
#[test]
fn every_regression_is_named() {
    let source = include_str!("regressions.rs");
    for (target, _) in corpus::TARGETS {
        for file in corpus::files(&corpus::dir("regressions", target)) {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            assert!(
                source.contains(&format!("holds(\"{target}\", \"{name}\")")),
                "regressions/{target}/{name} has no named test"
            );
        }
    }
}
