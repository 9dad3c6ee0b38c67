//! The words each input names a job's fields with: a job file's keys, `lockstep restore`'s
//! flags, a REST request's fields. Validation speaks the caller's; the CLI and REST forms
//! map their problems back with the same tables.

/// The words an input names a job's fields with: a job file's keys, `lockstep restore`'s
/// flags or a REST request's fields. A refusal says what to give in the caller's own words:
/// `-n/--name` to a CLI user, never `backup = …`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Vocabulary {
    File,
    Flags,
    Request,
}

impl Vocabulary {
    /// How to give `field` the value `value`, as this input writes it.
    pub(super) fn example(self, field: &str, value: &str) -> String {
        match self {
            Vocabulary::File => {
                let key = field.rsplit('.').next().unwrap_or(field);
                format!("{key} = \"{value}\"")
            }
            Vocabulary::Flags => format!("`{} {value}`", long_flag(field)),
            Vocabulary::Request => {
                let key = match json_field_for(field) {
                    "" => field,
                    known => known,
                };
                format!("\"{key}\": \"{value}\"")
            }
        }
    }

    /// How to give the list field `field` the `values`, as this input writes it.
    pub(crate) fn list(self, field: &str, values: &[String]) -> String {
        let quoted: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
        match self {
            Vocabulary::File => format!("{field} = [{}]", quoted.join(", ")),
            Vocabulary::Flags => format!("`{} {}`", long_flag(field), values.join(",")),
            Vocabulary::Request => format!("\"{field}\": [{}]", quoted.join(", ")),
        }
    }
}

/// The flag a job-file field comes from (`restore.rename[2]` → `-r/--rename`).
pub(super) fn flag_for(field: &str) -> String {
    let base = field.split('[').next().unwrap_or(field);
    match base {
        "name" | "backup" => "-n/--name".to_owned(),
        "restore.suffix" => "-s/--suffix".to_owned(),
        "restore.rename" => "-r/--rename".to_owned(),
        other => format!("--{}", other.rsplit('.').next().unwrap_or(other)),
    }
}

/// The long form of the flag a job-file field comes from (`--rename`).
fn long_flag(field: &str) -> String {
    let flag = flag_for(field);
    flag.rsplit('/').next().unwrap_or(&flag).to_owned()
}

/// The request field a job-file field comes from, where one field has one source.
pub(super) fn json_field_for(field: &str) -> &'static str {
    match field.split('[').next().unwrap_or(field) {
        "name" => "id",
        "backup" => "backup_name",
        "target" => "target",
        "secondaries" => "secondaries",
        "strategy" => "strategy",
        "restore.filter" => "db_collections_after_rename",
        "restore.suffix" => "collection_suffix",
        "restore.rename" => "collection_renames",
        "restore.drop_exist_collection" => "dropExistCollection",
        "restore.skip_create_collection" => "skipCreateCollection",
        "restore.max_shard_num" => "maxShardNum",
        _ => "",
    }
}
