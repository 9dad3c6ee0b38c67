//! The on-disk compile cache: each component is compiled once per wasmtime
//! version and engine configuration, and later loads deserialize the result.
//!
//! Deserializing is `unsafe` in wasmtime because the bytes become machine
//! code; it must only ever see bytes this host produced. So the cache folder,
//! and every file of it that is used, must be its user's alone: owned by the
//! effective user and writable by nobody else ([`crate::owner_only`]), judged
//! on the opened handle. A folder that is not (another user's, or one its
//! group or others can write, where anyone could have planted a key and
//! entries signed with it) is not used at all: one warning says why, and every
//! load compiles in memory. In a folder that is, every entry is signed with an
//! HMAC under a key that lives in it (created once, 0600), and an entry whose
//! tag does not verify, or that is not its user's alone — truncated, flipped,
//! copied from another machine — is recompiled, never loaded. Entries are
//! written to a temporary name and renamed into place, so a crash leaves
//! either the old entry or the new one.

use std::fs::{self, File};
use std::hash::Hasher;
use std::io::{Read, Write};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use ring::hmac;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::Error;
use crate::owner_only;

/// How a load found its compiled code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Deserialized from a verified cache entry.
    Hit,
    /// No entry yet: compiled and stored.
    Compiled,
    /// An entry was there but not trusted (the reason says why): recompiled
    /// and replaced.
    Rejected(String),
    /// The cache folder is not its user's alone (the reason says why):
    /// compiled in memory, nothing read from the folder or written to it.
    Unused(String),
}

impl std::fmt::Display for CacheOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CacheOutcome::Hit => f.write_str("hit"),
            CacheOutcome::Compiled => f.write_str("compiled"),
            CacheOutcome::Rejected(why) => write!(f, "rejected: {why}"),
            CacheOutcome::Unused(why) => write!(f, "unused: {why}"),
        }
    }
}

pub(crate) struct CompileCache {
    /// The folder and its key, or why the folder is not used.
    store: Result<Store, String>,
}

struct Store {
    dir: PathBuf,
    key: hmac::Key,
}

const KEY_FILE: &str = "cache.key";
const KEY_LEN: usize = 32;

impl CompileCache {
    /// Opens (creating if needed) the cache folder and its signing key; a
    /// folder or key that is not its user's alone gives a cache that is not
    /// used, after one warning naming it.
    pub(crate) fn open(dir: &Path) -> Result<CompileCache, Error> {
        let failed = |reason: String| Error::Cache {
            dir: dir.to_owned(),
            reason,
        };
        let handle =
            owner_only::open_dir(dir).map_err(|e| failed(format!("cannot create: {e}")))?;
        let found = handle
            .metadata()
            .map_err(|e| failed(format!("cannot read: {e}")))?;
        if let Err(untrusted) = owner_only::judge(dir, &found) {
            return Ok(CompileCache::unused(dir, untrusted));
        }
        owner_only::narrow(&handle, dir, owner_only::DIR_MODE)
            .map_err(|e| failed(format!("cannot make it owner-only: {e}")))?;
        let key_path = dir.join(KEY_FILE);
        let key = match File::open(&key_path) {
            Ok(mut file) => {
                let found = file
                    .metadata()
                    .map_err(|e| failed(format!("cannot read {KEY_FILE}: {e}")))?;
                if let Err(untrusted) = owner_only::judge(&key_path, &found) {
                    return Ok(CompileCache::unused(dir, untrusted));
                }
                let mut key = Vec::new();
                file.read_to_end(&mut key)
                    .map_err(|e| failed(format!("cannot read {KEY_FILE}: {e}")))?;
                key
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                create_key(dir, &key_path).map_err(|e| failed(format!("cannot create key: {e}")))?
            }
            Err(e) => return Err(failed(format!("cannot read {KEY_FILE}: {e}"))),
        };
        if key.len() != KEY_LEN {
            return Err(failed(format!(
                "{KEY_FILE} holds {} bytes, expected {KEY_LEN}; delete the folder to start afresh",
                key.len()
            )));
        }
        Ok(CompileCache {
            store: Ok(Store {
                dir: dir.to_owned(),
                key: hmac::Key::new(hmac::HMAC_SHA256, &key),
            }),
        })
    }

    /// A cache that compiles in memory because `dir` (or its key) is not its
    /// user's alone: whoever else can write there could have planted a key and
    /// entries signed with it.
    fn unused(dir: &Path, untrusted: owner_only::Untrusted) -> CompileCache {
        let hint = match untrusted {
            owner_only::Untrusted::Writable { .. } => {
                "; delete it and lockstep makes it again, its user's alone"
            }
            owner_only::Untrusted::NotOwned { .. } => "",
        };
        let reason = format!("{untrusted}{hint}");
        tracing::warn!(
            dir = %dir.display(),
            %reason,
            "plugin compile cache not used: every plugin is compiled in memory"
        );
        CompileCache { store: Err(reason) }
    }

    /// The compiled component for `wasm`, from the cache or compiled now.
    /// Blocking (compilation takes from milliseconds to seconds): call it from
    /// `spawn_blocking`.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> Result<(Component, CacheOutcome), wasmtime::Error> {
        match &self.store {
            Ok(store) => store.load(engine, wasm),
            Err(reason) => Ok((
                Component::new(engine, wasm)?,
                CacheOutcome::Unused(reason.clone()),
            )),
        }
    }
}

impl Store {
    fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> Result<(Component, CacheOutcome), wasmtime::Error> {
        let entry = self.dir.join(format!("{}.cwasm", entry_name(engine, wasm)));
        let tag_path = entry.with_extension("tag");
        let outcome = match self.verify(&entry, &tag_path) {
            Ok(Some(file)) => {
                // SAFETY: the file's HMAC under this cache's key verified, and
                // only `store` below signs, right after `precompile_component`
                // produced the bytes. It is mapped through the kernel's link to
                // the very descriptor that was hashed, not by the entry's name,
                // so no file swapped in after the check is reached; its bytes
                // could change only by its owner's hand, this user's. Mapping
                // (rather than loading the bytes just hashed) keeps a 35 MB
                // Python entry at ~4 ms instead of ~40 ms. Without /proc the
                // mapping fails, and the entry is recompiled.
                let opened = format!("/proc/self/fd/{}", file.as_raw_fd());
                match unsafe { Component::deserialize_file(engine, &opened) } {
                    Ok(component) => return Ok((component, CacheOutcome::Hit)),
                    Err(e) => CacheOutcome::Rejected(format!("deserialize: {e}")),
                }
            }
            Ok(None) => CacheOutcome::Compiled,
            Err(reason) => CacheOutcome::Rejected(reason),
        };
        if let CacheOutcome::Rejected(reason) = &outcome {
            tracing::warn!(entry = %entry.display(), %reason, "compile cache entry not trusted; recompiling");
        }
        let code = engine.precompile_component(wasm)?;
        if let Err(e) = self.store(&entry, &tag_path, &code) {
            // A cache that cannot be written costs time on the next load, not
            // correctness: go on with the freshly compiled code.
            tracing::warn!(entry = %entry.display(), error = %e, "cannot write compile cache entry");
        }
        // SAFETY: `code` was produced by `precompile_component` on this very
        // engine a moment ago.
        let component = unsafe { Component::deserialize(engine, &code)? };
        Ok((component, outcome))
    }

    /// `Ok(Some(file))`, the entry opened, if it is present, its user's alone
    /// and signed by this cache; `Ok(None)` if absent; `Err(reason)` if present
    /// but not trusted. Hashes in 1 MiB reads so a large entry is never held in
    /// memory twice.
    fn verify(&self, entry: &Path, tag_path: &Path) -> Result<Option<File>, String> {
        let mut file = match File::open(entry) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read: {e}")),
        };
        owners_alone(&file, entry)?;
        let mut tag_file = File::open(tag_path).map_err(|e| format!("no signature: {e}"))?;
        owners_alone(&tag_file, tag_path)?;
        let mut tag = Vec::new();
        tag_file
            .read_to_end(&mut tag)
            .map_err(|e| format!("cannot read the signature: {e}"))?;
        let mut signer = hmac::Context::with_key(&self.key);
        let mut buffer = vec![0u8; 1 << 20];
        loop {
            match file.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => signer.update(&buffer[..n]),
                Err(e) => return Err(format!("cannot read: {e}")),
            }
        }
        // A plain comparison: the tag protects a local file against
        // corruption and foreign copies, and no remote party can time it.
        if signer.sign().as_ref() != tag.as_slice() {
            return Err("signature does not match the cache key".to_owned());
        }
        Ok(Some(file))
    }

    fn store(&self, entry: &Path, tag_path: &Path, code: &[u8]) -> std::io::Result<()> {
        let tag = hmac::sign(&self.key, code);
        write_atomically(entry, code)?;
        write_atomically(tag_path, tag.as_ref())
    }
}

/// The cache key: wasmtime's compatibility hash (its version — the default
/// `module_version` — plus target, compiler flags, tunables and features, i.e.
/// everything that decides whether compiled code fits this engine) and the
/// component's sha256.
fn entry_name(engine: &Engine, wasm: &[u8]) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    hasher.0.update(b"lockstep plugin cache v1\0");
    std::hash::Hash::hash(&engine.precompile_compatibility_hash(), &mut hasher);
    hasher.0.update(Sha256::digest(wasm));
    hex::encode(hasher.0.finalize())
}

/// Feeds `Hash` impls into sha256, so the key is stable across processes
/// (std's `DefaultHasher` is seeded per build, not meant to be persisted).
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    fn finish(&self) -> u64 {
        let digest = self.0.clone().finalize();
        u64::from_le_bytes(digest[..8].try_into().expect("sha256 has 32 bytes"))
    }
}

/// Whether the opened `file` (at `path`) is its user's alone, as a reason
/// when it is not.
fn owners_alone(file: &File, path: &Path) -> Result<(), String> {
    let found = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    owner_only::judge(path, &found).map_err(|e| e.to_string())
}

fn temp_name(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(
        ".tmp-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    PathBuf::from(name)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temp = temp_name(path);
    let mut file = owner_only::create(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&temp, path)
}

/// Writes a fresh random key; a concurrent creator may win the race, in which
/// case its key is used (hard_link refuses to replace an existing file).
fn create_key(dir: &Path, key_path: &Path) -> std::io::Result<Vec<u8>> {
    let mut key = vec![0u8; KEY_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| std::io::Error::other("no system randomness"))?;
    let temp = temp_name(&dir.join(KEY_FILE));
    let mut file = owner_only::create(&temp)?;
    file.write_all(&key)?;
    file.sync_all()?;
    let linked = fs::hard_link(&temp, key_path);
    fs::remove_file(&temp)?;
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => fs::read(key_path),
        Err(e) => Err(e),
    }
}
