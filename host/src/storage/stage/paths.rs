//! Where staged files go: the restore's prefix, and the paths every end imports.

use object_store::path::Path;

use super::super::Error;
use super::super::open::StoreId;

/// Top-level directory of every staged restore in a destination store.
pub const STAGING_ROOT: &str = "lockstep-staging";

/// `lockstep-staging/{restore_id}`: the restore's prefix, the same in every destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagingPrefix(Path);

impl StagingPrefix {
    /// The prefix of the restore whose id is `restore_id`. Infallible: a path part escapes
    /// any `/` in it, so the id stays one segment whatever it holds.
    pub fn for_restore(restore_id: &str) -> Self {
        StagingPrefix(Path::from_iter([STAGING_ROOT, restore_id]))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

/// Where the ends import a backup's files from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportPaths {
    /// Every destination is the backup's own store: import the backup's paths, copy nothing.
    InPlace { backup_dir: Path },
    /// Stage into the restore's prefix on every destination and import from there.
    Staged { prefix: StagingPrefix },
}

impl ImportPaths {
    /// The prefix a backup file's relative path is appended to, identical on every end.
    pub fn prefix(&self) -> &Path {
        match self {
            ImportPaths::InPlace { backup_dir } => backup_dir,
            ImportPaths::Staged { prefix } => prefix.path(),
        }
    }
}

/// Picks where the ends import from. Every end imports the same paths (the target's job is
/// mirrored, paths and all, to the secondaries), so the backup is imported in place only
/// when every destination is the backup's store; otherwise all of them get the staging
/// prefix, and the destinations that are the backup's store get it by server-side copy.
pub fn import_paths(
    backup: &StoreId,
    backup_dir: &Path,
    destinations: &[&StoreId],
    staging: StagingPrefix,
) -> ImportPaths {
    if !destinations.is_empty() && destinations.iter().all(|id| *id == backup) {
        ImportPaths::InPlace {
            backup_dir: backup_dir.clone(),
        }
    } else {
        ImportPaths::Staged { prefix: staging }
    }
}

/// `base/relative`, refusing a relative path that is not a clean object path.
pub(super) fn join(base: &Path, relative: &str) -> Result<Path, Error> {
    let relative_path = Path::parse(relative).map_err(|e| Error::InvalidFilePath {
        path: relative.to_owned(),
        reason: e.to_string(),
    })?;
    if relative_path.as_ref().is_empty() {
        return Err(Error::InvalidFilePath {
            path: relative.to_owned(),
            reason: "empty path".to_owned(),
        });
    }
    Ok(base.parts().chain(relative_path.parts()).collect())
}
