//! The on-disk compile cache: each component is compiled once per wasmtime
//! version and engine configuration, and later loads deserialize the result.
//!
//! Deserializing is `unsafe` in wasmtime because the bytes become machine
//! code; it must only ever see bytes this host produced. So every entry is
//! signed with an HMAC under a key that lives in the cache folder (created
//! once, readable only by its owner), and an entry whose tag does not verify
//! — truncated, flipped, copied from another machine — is recompiled, never
//! loaded. Entries are written to a temporary name and renamed into place, so
//! a crash leaves either the old entry or the new one.

use std::fs;
use std::hash::Hasher;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use ring::hmac;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use super::Error;

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
}

pub(crate) struct CompileCache {
    dir: PathBuf,
    key: hmac::Key,
}

const KEY_FILE: &str = "cache.key";
const KEY_LEN: usize = 32;

impl CompileCache {
    /// Opens (creating if needed) the cache folder and its signing key.
    pub(crate) fn open(dir: &Path) -> Result<CompileCache, Error> {
        let failed = |reason: String| Error::Cache {
            dir: dir.to_owned(),
            reason,
        };
        create_private_dir(dir).map_err(|e| failed(format!("cannot create: {e}")))?;
        let key_path = dir.join(KEY_FILE);
        let key = match fs::read(&key_path) {
            Ok(key) => key,
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
            dir: dir.to_owned(),
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
        })
    }

    /// The compiled component for `wasm`, from the cache or compiled now.
    /// Blocking (compilation takes from milliseconds to seconds): call it from
    /// `spawn_blocking`.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        wasm: &[u8],
    ) -> Result<(Component, CacheOutcome), wasmtime::Error> {
        let entry = self.dir.join(format!("{}.cwasm", entry_name(engine, wasm)));
        let tag_path = entry.with_extension("tag");
        let outcome = match self.verify(&entry, &tag_path) {
            Ok(Some(())) => {
                // SAFETY: the file's HMAC under this cache's key verified, and
                // only `store` below signs, right after `precompile_component`
                // produced the bytes. Mapping the file (rather than loading the
                // bytes just hashed) keeps a 35 MB Python entry at ~4 ms instead
                // of ~40 ms; it leaves a window in which the file could be
                // swapped, but only by someone who can write the host's
                // owner-only cache folder, who could replace the host as well.
                match unsafe { Component::deserialize_file(engine, &entry) } {
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

    /// `Ok(Some(()))` if the entry is present and signed by this cache;
    /// `Ok(None)` if absent; `Err(reason)` if present but not trusted. Hashes
    /// in 1 MiB reads so a large entry is never held in memory twice.
    fn verify(&self, entry: &Path, tag_path: &Path) -> Result<Option<()>, String> {
        let mut file = match fs::File::open(entry) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read: {e}")),
        };
        let tag = fs::read(tag_path).map_err(|e| format!("no signature: {e}"))?;
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
        Ok(Some(()))
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

/// The cache folder, owner-only when this call creates it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
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
    let mut file = private_file(&temp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&temp, path)
}

fn private_file(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

/// Writes a fresh random key; a concurrent creator may win the race, in which
/// case its key is used (hard_link refuses to replace an existing file).
fn create_key(dir: &Path, key_path: &Path) -> std::io::Result<Vec<u8>> {
    let mut key = vec![0u8; KEY_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| std::io::Error::other("no system randomness"))?;
    let temp = temp_name(&dir.join(KEY_FILE));
    let mut file = private_file(&temp)?;
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
