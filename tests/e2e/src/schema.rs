//! The JSON Schemas of lockstep's outputs (`docs/schema/`), and a check of an output against
//! the one its command promises, by a real validator (the `jsonschema` crate, draft
//! 2020-12). [`crate::World::run_with`] holds every `--output json` it runs to its schema,
//! so every test that runs a command checks the contract scripts read.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context as _;
use serde_json::Value;

/// Where the schemas are, and the base of their `$id`s.
const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/schema");

/// Every schema of `docs/schema/`, by file name, and a registry of them all by `$id`, which
/// their `$ref`s to each other resolve against.
fn schemas() -> &'static (Vec<(String, Value)>, jsonschema::Registry<'static>) {
    static SCHEMAS: OnceLock<(Vec<(String, Value)>, jsonschema::Registry<'static>)> =
        OnceLock::new();
    SCHEMAS.get_or_init(|| {
        let mut schemas = Vec::new();
        for entry in std::fs::read_dir(DIR).expect("docs/schema lists") {
            let path: PathBuf = entry.expect("docs/schema lists").path();
            let name = (path.file_name().and_then(|n| n.to_str()))
                .expect("a UTF-8 schema name")
                .to_owned();
            let text = std::fs::read_to_string(&path).expect("a schema reads");
            let schema: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("docs/schema/{name} is not JSON: {e}"));
            schemas.push((name, schema));
        }
        let resources = schemas.iter().map(|(name, schema)| {
            let id = schema["$id"].as_str();
            let id = id.unwrap_or_else(|| panic!("docs/schema/{name} has no $id"));
            (
                id.to_owned(),
                jsonschema::Resource::from_contents(schema.clone()),
            )
        });
        let registry = (jsonschema::Registry::new().extend(resources))
            .and_then(jsonschema::RegistryBuilder::prepare)
            .expect("the schemas' $ids are URIs");
        (schemas, registry)
    })
}

/// Checks `output` against `docs/schema/{name}`: `Err` lists every place it breaks it.
pub fn check(name: &str, output: &Value) -> anyhow::Result<()> {
    let (all, registry) = schemas();
    let (_, schema) = (all.iter())
        .find(|(n, _)| n == name)
        .with_context(|| format!("no docs/schema/{name}"))?;
    let validator = (jsonschema::options().should_validate_formats(true))
        .with_registry(registry)
        .build(schema)
        .map_err(|e| anyhow::anyhow!("docs/schema/{name} does not compile: {e}"))?;
    let errors: Vec<String> = (validator.iter_errors(output))
        .map(|e| format!("  at {}: {e}", e.instance_path()))
        .collect();
    anyhow::ensure!(
        errors.is_empty(),
        "output does not match docs/schema/{name}:\n{}\noutput: {output}",
        errors.join("\n")
    );
    Ok(())
}

/// The schema a command's `--output json` follows, from its arguments and what it printed:
/// a refusal of its input has one shape whatever the command; `None` for a command whose
/// output has no schema.
pub fn of_command(args: &[&str], output: &Value) -> Option<&'static str> {
    let refusal = output["outcome"] == "refused" && output.get("error").is_some();
    if refusal {
        return Some("refusal.json");
    }
    // The first argument that is a command, past the global flags and their values.
    let mut args = args.iter().skip_while(|a| !COMMANDS.contains(a));
    let command = *args.next()?;
    // `status ID` shows one record; `status` and `status --last N` list.
    let rest: Vec<&str> = args.copied().collect();
    let names_one = (rest.iter().enumerate())
        .any(|(i, a)| !a.starts_with('-') && (i == 0 || rest[i - 1] != "--last"));
    Some(match command {
        "run" => "batch.json",
        "restore" => "report.json",
        "plan" => "plan.json",
        "verify" => "verify.json",
        "status" if names_one => "record.json",
        "status" => "status.json",
        _ => return None,
    })
}

/// lockstep's commands (`lockstep --help`).
const COMMANDS: &[&str] = &[
    "run", "restore", "plan", "check", "list", "get", "status", "recover", "prune", "verify",
    "demo", "plugin", "watch", "serve",
];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every schema compiles, and holds an output to what it says: the checks above cannot
    /// pass whatever they are given.
    #[test]
    fn every_schema_compiles_and_refuses_what_breaks_it() {
        for (name, _) in &schemas().0 {
            let compiled = check(name, &json!(null)).map_err(|e| e.to_string());
            assert!(
                compiled
                    .as_ref()
                    .is_err_and(|e| !e.contains("does not compile")),
                "{name}: {compiled:?}"
            );
        }
        let refusal = json!({
            "outcome": "refused",
            "error": "job file x.toml refused (1 problem)",
            "problems": [{"file": "x.toml", "line": 3, "column": 1, "field": "bogus",
                          "kind": "unknown_field", "text": "unknown field `bogus`"}],
        });
        check("refusal.json", &refusal).unwrap();
        let mut unlocated = refusal.clone();
        unlocated["problems"][0]["kind"] = json!("typo");
        assert!(check("refusal.json", &unlocated).is_err());
        let mut prose_only = refusal;
        prose_only.as_object_mut().unwrap().remove("problems");
        assert!(check("refusal.json", &prose_only).is_err());
    }

    #[test]
    fn a_commands_schema_follows_from_its_arguments_and_a_refusal_from_its_shape() {
        let report = json!({"outcome": "succeeded"});
        assert_eq!(
            of_command(&["--journal", "etcd://x/y", "run", "a.toml"], &report),
            Some("batch.json")
        );
        assert_eq!(of_command(&["status"], &json!([])), Some("status.json"));
        assert_eq!(
            of_command(&["status", "--last", "3"], &json!([])),
            Some("status.json")
        );
        assert_eq!(
            of_command(&["status", "a.b.1"], &report),
            Some("record.json")
        );
        let refused = json!({"outcome": "refused", "error": "x", "problems": []});
        assert_eq!(
            of_command(&["restore", "-n", "b"], &refused),
            Some("refusal.json")
        );
        assert_eq!(of_command(&["list"], &report), None);
    }
}
