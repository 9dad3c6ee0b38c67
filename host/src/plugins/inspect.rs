//! Reading a component's outside without compiling it: its imports and
//! exports, the lockstep WIT version it was built against, and whether the
//! host can run it. Serves `lockstep plugin inspect` and the import check that
//! [`super::PluginRuntime::load`] runs before compiling.

use std::fmt;
use std::path::{Path, PathBuf};

use wasmtime::wasmparser::{Chunk, ComponentTypeRef, Encoding, Parser, Payload};

use super::Error;

/// The WIT package and world every check targets.
const CHECK_WORLD: &str = "lockstep:plugin/check";
const HOST_INTERFACE: &str = "lockstep:plugin/host@";
const TYPES_INTERFACE: &str = "lockstep:plugin/types@";
/// lockstep:plugin versions this host links (semver-compatible with 0.1.0).
const HOST_VERSION_PREFIX: &str = "0.1.";
/// WASI packages and versions wasmtime-wasi's p2 linker provides (all with
/// nothing granted); wasi:http is not among them.
const WASI_PACKAGES: [&str; 6] = [
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];
const WASI_VERSION_PREFIX: &str = "0.2.";

/// What `lockstep plugin inspect` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    pub path: PathBuf,
    pub size: u64,
    /// `lockstep:plugin/check@<version>` when the component targets it.
    pub world: Option<String>,
    /// The lockstep:plugin version its host import names.
    pub wit_version: Option<String>,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// `Err(reason)` when [`super::PluginRuntime::load`] would refuse it by
    /// its imports or exports (a type mismatch shows only at load).
    pub verdict: Result<(), String>,
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "file:        {}", self.path.display())?;
        writeln!(f, "size:        {} bytes", self.size)?;
        writeln!(
            f,
            "world:       {}",
            self.world.as_deref().unwrap_or("(not a lockstep check)")
        )?;
        writeln!(
            f,
            "wit version: {}",
            self.wit_version.as_deref().unwrap_or("-")
        )?;
        writeln!(f, "imports:")?;
        for import in &self.imports {
            writeln!(f, "  {import}")?;
        }
        writeln!(f, "exports:")?;
        for export in &self.exports {
            writeln!(f, "  {export}")?;
        }
        match &self.verdict {
            Ok(()) => write!(f, "loadable:    yes"),
            Err(reason) => write!(f, "loadable:    no: {reason}"),
        }
    }
}

/// Inspects the component at `path`.
pub fn inspect(path: &Path) -> Result<Inspection, Error> {
    let wasm = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_owned(),
        source,
    })?;
    let (imports, exports) = component_surface(path, &wasm)?;
    let wit_version = imports
        .iter()
        .find_map(|name| name.strip_prefix(HOST_INTERFACE))
        .map(str::to_owned);
    let world = exports
        .iter()
        .any(|e| e == "check")
        .then(|| format!("{CHECK_WORLD}@{}", wit_version.as_deref().unwrap_or("?")));
    let verdict = surface_verdict(path, &imports, &exports).map_err(|e| e.to_string());
    Ok(Inspection {
        path: path.to_owned(),
        size: wasm.len() as u64,
        world,
        wit_version,
        imports,
        exports,
        verdict,
    })
}

/// Refuses a component importing anything but the lockstep host interface
/// and WASI 0.2, naming the first foreign import; refuses one without a
/// `check` export.
pub(crate) fn refuse_foreign_imports(path: &Path, wasm: &[u8]) -> Result<(), Error> {
    let (imports, exports) = component_surface(path, wasm)?;
    surface_verdict(path, &imports, &exports)
}

fn surface_verdict(path: &Path, imports: &[String], exports: &[String]) -> Result<(), Error> {
    if let Some(import) = imports.iter().find(|name| !host_provides(name)) {
        return Err(Error::UnknownImport {
            path: path.to_owned(),
            import: import.clone(),
        });
    }
    if !exports.iter().any(|e| e == "check") {
        return Err(Error::WorldMismatch {
            path: path.to_owned(),
            reason: format!("no `check` export (exports: {})", exports.join(", ")),
        });
    }
    Ok(())
}

fn host_provides(import: &str) -> bool {
    let versioned = |prefix: &str, version: &str| {
        import
            .strip_prefix(prefix)
            .is_some_and(|v| v.starts_with(version))
    };
    versioned(HOST_INTERFACE, HOST_VERSION_PREFIX)
        || versioned(TYPES_INTERFACE, HOST_VERSION_PREFIX)
        || (WASI_PACKAGES.iter().any(|p| import.starts_with(p))
            && import
                .split_once('@')
                .is_some_and(|(_, v)| v.starts_with(WASI_VERSION_PREFIX)))
}

/// Top-level import names (types left out) and export names of a component.
/// Nested modules and components are skipped unread: they are most of the
/// bytes (an 18 MB Python check is nearly all interpreter) and none of the
/// component's own surface.
fn component_surface(path: &Path, wasm: &[u8]) -> Result<(Vec<String>, Vec<String>), Error> {
    let not_component = |reason: String| Error::NotAComponent {
        path: path.to_owned(),
        reason,
    };
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    let mut parser = Parser::new(0);
    let mut rest = wasm;
    loop {
        let (consumed, payload) = match parser
            .parse(rest, true)
            .map_err(|e| not_component(e.to_string()))?
        {
            Chunk::Parsed { consumed, payload } => (consumed, payload),
            Chunk::NeedMoreData(_) => {
                return Err(not_component("the file ends mid-section".into()));
            }
        };
        rest = &rest[consumed..];
        match payload {
            Payload::Version { encoding, .. } if encoding != Encoding::Component => {
                return Err(not_component(
                    "it is a core module; build it as a component (wasm32-wasip2, or wasm-tools component new)".into(),
                ));
            }
            Payload::ModuleSection {
                unchecked_range, ..
            }
            | Payload::ComponentSection {
                unchecked_range, ..
            } => {
                rest = wasm
                    .get(unchecked_range.end..)
                    .ok_or_else(|| not_component("a nested section runs past the end".into()))?;
            }
            Payload::ComponentImportSection(reader) => {
                for import in reader {
                    let import = import.map_err(|e| not_component(e.to_string()))?;
                    // A world's `use` imports bare type names (`restore-context`):
                    // types grant nothing, so only functions and instances count.
                    if !matches!(import.ty, ComponentTypeRef::Type(_)) {
                        imports.push(import.name.name.to_owned());
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(|e| not_component(e.to_string()))?;
                    exports.push(export.name.name.to_owned());
                }
            }
            Payload::End(_) => return Ok((imports, exports)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::host_provides;

    #[test]
    fn provides_the_lockstep_host_and_wasi_0_2_only() {
        assert!(host_provides("lockstep:plugin/host@0.1.0"));
        assert!(host_provides("lockstep:plugin/types@0.1.3"));
        assert!(host_provides("wasi:cli/environment@0.2.6"));
        assert!(!host_provides("lockstep:plugin/host@0.2.0"));
        assert!(!host_provides("wasi:http/outgoing-handler@0.2.0"));
        assert!(!host_provides("wasi:cli/environment@0.3.0"));
        assert!(!host_provides("evil:net/raw@1.0.0"));
        assert!(!host_provides("wasi:cli/environment"));
    }
}
