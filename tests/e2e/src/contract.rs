//! The API contract (`docs/openapi.json`) checked against every answer the suites receive.
//!
//! [`crate::send`] hands each answer to [`check`]: the operation is found by method and path
//! as OpenAPI matches them (a literal segment before a `{template}`), and the answer must be
//! one the document lists for it: its status, its content type, and a body its schema accepts.
//! So every e2e test is also a conformance test, and a route that answers a status, a field or
//! an error code the document does not list fails the test that provoked it.
//!
//! The validator knows the JSON Schema keywords the document uses and refuses any other, so
//! the document cannot rely on a keyword that would be silently ignored here. Schemathesis
//! (in `scripts/test`) checks the same document with a full validator.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

/// The document, read once per test binary.
pub fn spec() -> &'static Value {
    static SPEC: OnceLock<Value> = OnceLock::new();
    SPEC.get_or_init(|| {
        let path = crate::repo_root().join("docs/openapi.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
    })
}

/// The answer a route gave, as [`check`] needs it.
pub struct Answer<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub content_type: &'a str,
    pub body: &'a str,
}

/// The document's path template that serves `path`, if any: every segment equal, or a
/// `{name}` template segment for any non-empty segment; the match with the most literal
/// segments wins, as OpenAPI requires.
pub fn path_template(spec: &Value, path: &str) -> Option<String> {
    let paths = spec["paths"].as_object()?;
    let wanted: Vec<&str> = path.split('/').collect();
    paths
        .keys()
        .filter_map(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            if parts.len() != wanted.len() {
                return None;
            }
            let mut literal = 0;
            for (part, seg) in parts.iter().zip(&wanted) {
                if part.starts_with('{') && part.ends_with('}') {
                    if seg.is_empty() {
                        return None;
                    }
                } else if part == seg {
                    literal += 1;
                } else {
                    return None;
                }
            }
            Some((literal, template))
        })
        .max_by_key(|(literal, _)| *literal)
        .map(|(_, template)| template.clone())
}

/// `Ok` when the document lists this answer for this request; otherwise what is wrong.
pub fn check(answer: &Answer<'_>) -> Result<(), String> {
    let spec = spec();
    let method = answer.method.to_ascii_lowercase();
    let operation = path_template(spec, answer.path)
        .and_then(|template| spec["paths"][template.as_str()].get(&method).cloned());
    let Some(operation) = operation else {
        // A path or method the document does not have: the only answers are the router's.
        return check_undocumented(answer);
    };
    let responses = operation["responses"]
        .as_object()
        .ok_or("the operation lists no responses")?;
    let status = answer.status.to_string();
    let range = format!("{}XX", answer.status / 100);
    let response = responses
        .get(&status)
        .or_else(|| responses.get(&range))
        .or_else(|| responses.get("default"))
        .ok_or_else(|| format!("status {status} is not listed for this operation"))?;
    let response = resolve(spec, response)?;
    let Some(content) = response.get("content").and_then(Value::as_object) else {
        return if answer.body.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "status {status} is listed without a body, but one came"
            ))
        };
    };
    let media = media_type(answer.content_type);
    let (_, entry) = content
        .iter()
        .find(|(listed, _)| media_type(listed) == media)
        .ok_or_else(|| {
            format!(
                "content type {:?} is not listed for status {status} (listed: {:?})",
                answer.content_type,
                content.keys().collect::<Vec<_>>()
            )
        })?;
    let Some(schema) = entry.get("schema") else {
        return Ok(());
    };
    let instance = if media == "application/json" {
        serde_json::from_str(answer.body).map_err(|e| format!("the body is not JSON: {e}"))?
    } else {
        Value::String(answer.body.to_owned())
    };
    let mut errors = Vec::new();
    Validator { spec }.validate(schema, &instance, "$", &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the body does not match the schema: {}",
            errors.join("; ")
        ))
    }
}

/// `wrangler dev --test-scheduled` answers this path itself, before the Worker: the local
/// stand-in for the cron trigger, not part of the API.
const LOCAL_CRON_TRIGGER: &str = "/__scheduled";

/// A request the document has no operation for may only be refused by the router.
fn check_undocumented(answer: &Answer<'_>) -> Result<(), String> {
    if answer.path == LOCAL_CRON_TRIGGER {
        return Ok(());
    }
    let code = serde_json::from_str::<Value>(answer.body)
        .ok()
        .and_then(|body| body["error"]["code"].as_str().map(str::to_owned));
    match (answer.status, code.as_deref()) {
        (404, Some("NOT_FOUND")) | (405, Some("METHOD_NOT_ALLOWED")) => Ok(()),
        _ => Err(format!(
            "the document has no operation {} {}, and the answer is not the router's 404 or 405",
            answer.method, answer.path
        )),
    }
}

fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Follows a `$ref` (local JSON pointers only) to what it names.
fn resolve<'a>(spec: &'a Value, node: &'a Value) -> Result<&'a Value, String> {
    match node.get("$ref").and_then(Value::as_str) {
        Some(reference) => pointer(spec, reference),
        None => Ok(node),
    }
}

fn pointer<'a>(spec: &'a Value, reference: &str) -> Result<&'a Value, String> {
    reference
        .strip_prefix('#')
        .and_then(|p| spec.pointer(p))
        .ok_or_else(|| format!("unresolvable $ref {reference}"))
}

/// Keywords that only annotate.
const ANNOTATIONS: [&str; 8] = [
    "description",
    "title",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
];

struct Validator<'a> {
    spec: &'a Value,
}

impl Validator<'_> {
    fn validate(&self, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
        let schema = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => return errors.push(format!("{at}: no value is allowed here")),
            Value::Object(schema) => schema,
            other => panic!("contract: a schema must be an object or a boolean, not {other}"),
        };
        for (keyword, arg) in schema {
            self.keyword(schema, keyword, arg, value, at, errors);
        }
    }

    fn keyword(
        &self,
        schema: &Map<String, Value>,
        keyword: &str,
        arg: &Value,
        value: &Value,
        at: &str,
        errors: &mut Vec<String>,
    ) {
        let mut fail = |message: String| errors.push(format!("{at}: {message}"));
        match keyword {
            "$ref" => {
                let target = pointer(self.spec, arg.as_str().unwrap_or(""))
                    .unwrap_or_else(|e| panic!("contract: {e}"));
                self.validate(target, value, at, errors);
            }
            "type" => {
                let allowed: Vec<&str> = match arg {
                    Value::String(one) => vec![one.as_str()],
                    Value::Array(many) => many.iter().filter_map(Value::as_str).collect(),
                    _ => panic!("contract: type must be a string or a list"),
                };
                if !allowed.iter().any(|t| is_type(value, t)) {
                    fail(format!("{} is not of type {allowed:?}", short(value)));
                }
            }
            "enum" => {
                let list = arg.as_array().expect("contract: enum is a list");
                if !list.iter().any(|item| same(item, value)) {
                    fail(format!("{} is not one of {arg}", short(value)));
                }
            }
            "const" => {
                if !same(arg, value) {
                    fail(format!("{} is not {arg}", short(value)));
                }
            }
            "properties"
            | "required"
            | "additionalProperties"
            | "minProperties"
            | "maxProperties" => {
                if let Value::Object(object) = value {
                    self.object_keyword(schema, keyword, arg, object, at, errors);
                }
            }
            "items" | "prefixItems" | "minItems" | "maxItems" | "uniqueItems" => {
                if let Value::Array(items) = value {
                    self.array_keyword(schema, keyword, arg, items, at, errors);
                }
            }
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" => {
                if let (Some(n), Some(bound)) = (number(value), number(arg)) {
                    let ok = match keyword {
                        "minimum" => n >= bound,
                        "maximum" => n <= bound,
                        "exclusiveMinimum" => n > bound,
                        _ => n < bound,
                    };
                    if !ok {
                        fail(format!("{value} breaks {keyword} {arg}"));
                    }
                }
            }
            "minLength" | "maxLength" => {
                if let Value::String(text) = value {
                    let len = text.chars().count() as u64;
                    let bound = arg.as_u64().expect("contract: a length is an integer");
                    if (keyword == "minLength" && len < bound)
                        || (keyword == "maxLength" && len > bound)
                    {
                        fail(format!(
                            "a string of {len} characters breaks {keyword} {bound}"
                        ));
                    }
                }
            }
            "pattern" => {
                if let Value::String(text) = value {
                    let pattern = arg.as_str().expect("contract: a pattern is a string");
                    if !regex(pattern).is_match(text) {
                        fail(format!("{} does not match {pattern}", short(value)));
                    }
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                let branches = arg.as_array().expect("contract: a list of schemas");
                let passing = branches
                    .iter()
                    .filter(|branch| {
                        let mut inner = Vec::new();
                        self.validate(branch, value, at, &mut inner);
                        inner.is_empty()
                    })
                    .count();
                let ok = match keyword {
                    "allOf" => passing == branches.len(),
                    "anyOf" => passing > 0,
                    _ => passing == 1,
                };
                if !ok {
                    let mut detail = Vec::new();
                    for branch in branches {
                        self.validate(branch, value, at, &mut detail);
                    }
                    fail(format!(
                        "{keyword}: {passing} of {} schemas match ({})",
                        branches.len(),
                        detail.join("; ")
                    ));
                }
            }
            "not" => {
                let mut inner = Vec::new();
                self.validate(arg, value, at, &mut inner);
                if inner.is_empty() {
                    fail(format!("{} matches a schema it must not", short(value)));
                }
            }
            known if ANNOTATIONS.contains(&known) || known.starts_with("x-") => {}
            unknown => panic!("contract: the validator does not know the keyword {unknown:?}"),
        }
    }

    fn object_keyword(
        &self,
        schema: &Map<String, Value>,
        keyword: &str,
        arg: &Value,
        object: &Map<String, Value>,
        at: &str,
        errors: &mut Vec<String>,
    ) {
        match keyword {
            "properties" => {
                for (name, sub) in arg.as_object().expect("contract: properties is an object") {
                    if let Some(value) = object.get(name) {
                        self.validate(sub, value, &format!("{at}.{name}"), errors);
                    }
                }
            }
            "required" => {
                for name in arg.as_array().expect("contract: required is a list") {
                    let name = name.as_str().unwrap_or_default();
                    if !object.contains_key(name) {
                        errors.push(format!("{at}: the required field {name} is missing"));
                    }
                }
            }
            "additionalProperties" => {
                let listed = schema.get("properties").and_then(Value::as_object);
                for (name, value) in object {
                    if listed.is_some_and(|listed| listed.contains_key(name)) {
                        continue;
                    }
                    match arg {
                        Value::Bool(false) => {
                            errors.push(format!("{at}: the field {name} is not in the document"))
                        }
                        sub => self.validate(sub, value, &format!("{at}.{name}"), errors),
                    }
                }
            }
            "minProperties" | "maxProperties" => {
                let bound = arg.as_u64().expect("contract: a count is an integer") as usize;
                if (keyword == "minProperties" && object.len() < bound)
                    || (keyword == "maxProperties" && object.len() > bound)
                {
                    errors.push(format!(
                        "{at}: {} fields break {keyword} {bound}",
                        object.len()
                    ));
                }
            }
            _ => unreachable!("object keywords are listed by the caller"),
        }
    }

    fn array_keyword(
        &self,
        schema: &Map<String, Value>,
        keyword: &str,
        arg: &Value,
        items: &[Value],
        at: &str,
        errors: &mut Vec<String>,
    ) {
        let prefix = schema
            .get("prefixItems")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        match keyword {
            "prefixItems" => {
                for (i, (sub, item)) in arg
                    .as_array()
                    .expect("contract: prefixItems is a list")
                    .iter()
                    .zip(items)
                    .enumerate()
                {
                    self.validate(sub, item, &format!("{at}[{i}]"), errors);
                }
            }
            "items" => {
                for (i, item) in items.iter().enumerate().skip(prefix) {
                    self.validate(arg, item, &format!("{at}[{i}]"), errors);
                }
            }
            "minItems" | "maxItems" => {
                let bound = arg.as_u64().expect("contract: a count is an integer") as usize;
                if (keyword == "minItems" && items.len() < bound)
                    || (keyword == "maxItems" && items.len() > bound)
                {
                    errors.push(format!(
                        "{at}: {} items break {keyword} {bound}",
                        items.len()
                    ));
                }
            }
            "uniqueItems" => {
                if arg == &Value::Bool(true) {
                    for (i, a) in items.iter().enumerate() {
                        if items[..i].iter().any(|b| same(a, b)) {
                            errors.push(format!("{at}: item {i} repeats an earlier one"));
                        }
                    }
                }
            }
            _ => unreachable!("array keywords are listed by the caller"),
        }
    }
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "null" => value.is_null(),
        "boolean" => value.is_boolean(),
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => number(value).is_some_and(|n| n.fract() == 0.0),
        other => panic!("contract: unknown type {other:?}"),
    }
}

fn number(value: &Value) -> Option<f64> {
    value.as_f64()
}

/// JSON equality with numbers compared by value (1 and 1.0 are the same number).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => number(a) == number(b),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| same(a, b)))
        }
        _ => a == b,
    }
}

fn regex(pattern: &str) -> Regex {
    static CACHE: OnceLock<std::sync::Mutex<BTreeMap<String, Regex>>> = OnceLock::new();
    let mut cache = CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    cache
        .entry(pattern.to_owned())
        .or_insert_with(|| {
            Regex::new(pattern).unwrap_or_else(|e| panic!("contract: bad pattern {pattern}: {e}"))
        })
        .clone()
}

/// A value, cut short for a message.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(120) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::Validator;
    use serde_json::{json, Value};

    fn errors(schema: Value, value: Value) -> Vec<String> {
        let spec = json!({ "components": { "schemas": { "Id": { "type": "string", "pattern": "^id_[0-9]+$" } } } });
        let mut errors = Vec::new();
        Validator { spec: &spec }.validate(&schema, &value, "$", &mut errors);
        errors
    }

    #[test]
    fn each_keyword_refuses_what_it_must_and_accepts_the_rest() {
        let object = json!({
            "type": "object",
            "required": ["id", "n"],
            "additionalProperties": false,
            "properties": {
                "id": { "$ref": "#/components/schemas/Id" },
                "n": { "type": "integer", "minimum": 1, "maximum": 3 },
                "tags": { "type": "array", "items": { "enum": ["a", "b"] }, "maxItems": 2, "uniqueItems": true },
                "note": { "type": ["string", "null"], "maxLength": 3 }
            }
        });
        assert!(errors(
            object.clone(),
            json!({"id": "id_1", "n": 2, "tags": ["a"], "note": null})
        )
        .is_empty());
        for bad in [
            json!({"id": "id_1"}),
            json!({"id": "x", "n": 2}),
            json!({"id": "id_1", "n": 4}),
            json!({"id": "id_1", "n": 1.5}),
            json!({"id": "id_1", "n": 1, "extra": true}),
            json!({"id": "id_1", "n": 1, "tags": ["c"]}),
            json!({"id": "id_1", "n": 1, "tags": ["a", "a"]}),
            json!({"id": "id_1", "n": 1, "tags": ["a", "b", "a"]}),
            json!({"id": "id_1", "n": 1, "note": "long"}),
            json!([]),
        ] {
            assert!(
                !errors(object.clone(), bad.clone()).is_empty(),
                "{bad} passed"
            );
        }
        let one_of = json!({ "oneOf": [{ "type": "integer" }, { "type": "number" }] });
        assert!(
            !errors(one_of, json!(1)).is_empty(),
            "1 matches both branches"
        );
        assert!(errors(json!({ "not": { "const": 0 } }), json!(1)).is_empty());
        assert!(!errors(json!({ "not": { "const": 0 } }), json!(0)).is_empty());
    }

    #[test]
    #[should_panic(expected = "does not know the keyword")]
    fn an_unknown_keyword_is_refused_not_ignored() {
        errors(json!({ "nullable": true }), json!(null));
    }
}
