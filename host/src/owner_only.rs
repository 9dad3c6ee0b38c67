//! What lockstep keeps on disk is its own user's alone: the state directory and everything
//! under it (journal records with their lock and temp files, reports, the plugin compile
//! cache). A record names every end of a restore, a refusal report can quote a job file,
//! and the compile cache holds machine code lockstep runs, so none of it is left to the
//! umask. Files are created 0600 and directories 0700, the mode given at creation and then
//! set exactly (a umask such as 0277 would take even the owner's write bit); a directory
//! that already exists with wider bits is narrowed when this user owns it, and refused when
//! another user does, since its owner could read or replace what lockstep writes there.
//!
//! Every judgement is made on an opened handle (`fstat`, `fchmod`), never on a path that
//! could name something else a moment later.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{
    DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

/// Mode of every directory lockstep creates in its state directory.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file lockstep writes there.
pub const FILE_MODE: u32 = 0o600;

/// Why what is at a path is not this user's alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error(
        "{path} belongs to uid {owner}, not to uid {user} that lockstep runs as (its owner can \
         read and replace what lockstep keeps there): chown it to uid {user}, or use another \
         directory"
    )]
    NotOwned {
        path: PathBuf,
        owner: u32,
        user: u32,
    },
    #[error("{path} can be written by its group or by others (mode {mode:03o})")]
    Writable { path: PathBuf, mode: u32 },
}

/// Whether what `meta` describes (found at `path`) is this user's alone: owned by the
/// effective user and writable by nobody else.
pub fn judge(path: &Path, meta: &fs::Metadata) -> Result<(), Untrusted> {
    judge_ids(
        path,
        meta.uid(),
        meta.mode(),
        rustix::process::geteuid().as_raw(),
    )
}

fn judge_ids(path: &Path, owner: u32, mode: u32, user: u32) -> Result<(), Untrusted> {
    if owner != user {
        return Err(Untrusted::NotOwned {
            path: path.to_owned(),
            owner,
            user,
        });
    }
    if mode & 0o022 != 0 {
        return Err(Untrusted::Writable {
            path: path.to_owned(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Opens the directory `path`, creating it 0700 first when missing (and any missing parent,
/// 0700 too); the handle is what a caller judges and narrows.
pub fn open_dir(path: &Path) -> io::Result<File> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    File::open(path)
}

/// Sets the mode of the opened `file` (found at `path`) to exactly `mode`, saying so when
/// that took bits from its group or others.
pub fn narrow(file: &File, path: &Path, mode: u32) -> io::Result<()> {
    let found = file.metadata()?.mode() & 0o7777;
    if found == mode {
        return Ok(());
    }
    if found & 0o077 != 0 {
        tracing::warn!(
            path = %path.display(),
            "mode {found:03o} narrowed to {mode:03o}: what lockstep keeps is its user's alone"
        );
    }
    file.set_permissions(fs::Permissions::from_mode(mode))
}

/// The state directory, or a directory in it: created 0700, or narrowed to 0700 when this
/// user owns it. Another user's is refused (`PermissionDenied`, its cause an
/// [`Untrusted::NotOwned`]) and left as it is.
pub fn dir(path: &Path) -> io::Result<()> {
    let handle = open_dir(path)?;
    if let Err(e @ Untrusted::NotOwned { .. }) = judge(path, &handle.metadata()?) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, e));
    }
    narrow(&handle, path, DIR_MODE)
}

/// Opens `path` as `options` say, creating it 0600; a file found with other bits (written
/// by an earlier version, or under a umask that took the owner's) is set to 0600.
pub fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options.mode(FILE_MODE).open(path)?;
    narrow(&file, path, FILE_MODE)?;
    Ok(file)
}

/// Creates (or truncates) `path` for writing, 0600.
pub fn create(path: &Path) -> io::Result<File> {
    open(
        path,
        OpenOptions::new().write(true).create(true).truncate(true),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn another_users_directory_is_refused_and_a_writable_one_named() {
        let path = Path::new("/srv/state");
        assert_eq!(judge_ids(path, 1000, 0o40700, 1000), Ok(()));
        assert_eq!(
            judge_ids(path, 1000, 0o40755, 1000),
            Ok(()),
            "readable only"
        );
        let not_owned = judge_ids(path, 0, 0o40700, 1000).unwrap_err();
        assert!(
            matches!(
                not_owned,
                Untrusted::NotOwned {
                    owner: 0,
                    user: 1000,
                    ..
                }
            ),
            "{not_owned:?}"
        );
        let message = not_owned.to_string();
        assert!(
            message.contains("/srv/state") && message.contains("chown it to uid 1000"),
            "{message}"
        );
        for wide in [0o40777, 0o40770, 0o40702] {
            assert!(
                matches!(
                    judge_ids(path, 1000, wide, 1000),
                    Err(Untrusted::Writable { mode, .. }) if mode == wide & 0o7777
                ),
                "{wide:o}"
            );
        }
    }

    #[test]
    fn directories_and_files_are_created_owner_only_and_wider_ones_narrowed() {
        let temp = tempfile::tempdir().unwrap();
        let state = temp.path().join("a/state");
        dir(&state).unwrap();
        assert_eq!(mode(&state), DIR_MODE);
        assert_eq!(
            mode(&temp.path().join("a")),
            DIR_MODE,
            "a parent it created"
        );

        let old = temp.path().join("old");
        fs::create_dir(&old).unwrap();
        fs::set_permissions(&old, fs::Permissions::from_mode(0o777)).unwrap();
        dir(&old).unwrap();
        assert_eq!(
            mode(&old),
            DIR_MODE,
            "an existing directory of ours is narrowed"
        );

        let record = state.join("r.json");
        fs::write(&record, "old").unwrap();
        fs::set_permissions(&record, fs::Permissions::from_mode(0o644)).unwrap();
        let mut file = create(&record).unwrap();
        io::Write::write_all(&mut file, b"new").unwrap();
        assert_eq!(mode(&record), FILE_MODE);
        assert_eq!(fs::read(&record).unwrap(), b"new");
        create(&state.join("fresh")).unwrap();
        assert_eq!(mode(&state.join("fresh")), FILE_MODE);
    }
}
