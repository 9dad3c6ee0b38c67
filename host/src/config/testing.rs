//! What the job tests share: the test host config and environment.

use std::path::PathBuf;

use super::HostConfig;

pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// `tests/data/jobs/lockstep.toml`, validated.
pub fn host() -> HostConfig {
    HostConfig::load(&data_dir().join("jobs/lockstep.toml")).expect("the test host config is valid")
}

/// The environment the tests run jobs in: prod-a's token and minio-a's keys are set,
/// prod-c's token is not.
pub fn env(name: &str) -> Option<String> {
    match name {
        "PROD_A_TOKEN" => Some("root:Milvus".to_owned()),
        "MINIO_A_KEY" | "MINIO_A_SECRET" => Some("minioadmin".to_owned()),
        _ => None,
    }
}
