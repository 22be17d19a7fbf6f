//! The repository's documents this crate's names must agree with, read by native tests:
//! `docs/openapi.json` (the API contract) and `migrations/*.sql` (the schema's CHECK lists).
//!
//! Read from disk rather than compiled in, so the wasm32 build of the tests carries neither.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(relative: &str) -> String {
    let path = repository().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub(crate) fn openapi() -> Value {
    serde_json::from_str(&read("docs/openapi.json")).expect("docs/openapi.json is JSON")
}

/// Every code an `error.code` enum of the document lists, under any route and status.
pub(crate) fn documented_error_codes() -> BTreeSet<String> {
    fn walk(value: &Value, codes: &mut BTreeSet<String>) {
        match value {
            Value::Object(map) => {
                if let Some(listed) = map.get("code").and_then(|code| code.get("enum")) {
                    let listed = listed.as_array().expect("a code enum is an array");
                    codes.extend(
                        listed
                            .iter()
                            .map(|c| c.as_str().expect("a listed code is a string").to_owned()),
                    );
                }
                map.values().for_each(|v| walk(v, codes));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, codes)),
            _ => {}
        }
    }
    let mut codes = BTreeSet::new();
    walk(&openapi(), &mut codes);
    codes
}

/// The `enum` of `property` in the document's schema `schema`, in its order.
pub(crate) fn schema_enum(schema: &str, property: &str) -> Vec<String> {
    let document = openapi();
    let listed = &document["components"]["schemas"][schema]["properties"][property]["enum"];
    listed
        .as_array()
        .unwrap_or_else(|| panic!("{schema}.{property} has an enum"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_owned())
        .collect()
}

/// The names `CHECK (<column> IN ('a', 'b', …))` allows in `table`, as the last migration that
/// creates the table has it (a later migration rebuilds a table whole, so the last one wins).
pub(crate) fn check_list(table: &str, column: &str) -> Vec<String> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(repository().join("migrations"))
        .expect("migrations/ is readable")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    paths.sort();
    let create = format!("CREATE TABLE {table} (");
    let statement = paths
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).expect("a migration is readable");
            let at = text.rfind(&create)?;
            let rest = &text[at..];
            // `);`, or `) WITHOUT ROWID;`
            let end = rest
                .find("\n)")
                .expect("a CREATE TABLE ends with `)` on a line");
            Some(rest[..end].to_owned())
        })
        .next_back()
        .unwrap_or_else(|| panic!("no migration creates {table}"));
    let check = format!("CHECK ({column} IN (");
    let from = statement
        .find(&check)
        .unwrap_or_else(|| panic!("{table} has no {check}"))
        + check.len();
    let list = &statement[from..from + statement[from..].find(')').expect("the list closes")];
    list.split(',')
        .map(|name| {
            name.trim()
                .strip_prefix('\'')
                .and_then(|n| n.strip_suffix('\''))
                .expect("a quoted name")
                .to_owned()
        })
        .collect()
}
