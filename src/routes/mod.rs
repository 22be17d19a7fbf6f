//! HTTP handlers, one module per surface. Each takes its proof of authentication from
//! [`crate::auth`], its storage from [`crate::store`], and the JSON it answers from [`views`].

pub(crate) mod api_keys;
pub(crate) mod custody;
pub(crate) mod enrollment;
pub(crate) mod evidence;
pub(crate) mod identity;
pub(crate) mod jobs;
pub(crate) mod queues;
pub(crate) mod releases;
pub(crate) mod retention;
pub(crate) mod runner_files;
pub(crate) mod runner_jobs;
pub(crate) mod runners;
pub(crate) mod views;

use edgerunner_protocol::capability::CapabilityDocument;
use edgerunner_protocol::error_code::ErrorCode;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

/// A required non-empty string field of a request body. NUL and control characters other
/// than tab and line breaks are refused: no field has a use for them, and SQLite stops
/// counting a string's length at a NUL.
pub(crate) fn required_str<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
) -> ApiResult<&'a str> {
    without(required_text(body, field, max_len)?, field, |c| {
        c.is_control() && !matches!(c, '\t' | '\n' | '\r')
    })
}

/// A name or key: a required string without any control character (no tab, no line break).
pub(crate) fn required_name<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
) -> ApiResult<&'a str> {
    without(
        required_text(body, field, max_len)?,
        field,
        char::is_control,
    )
}

/// `text`, unless it holds a character `refused` names: `422 INVALID_CHARACTERS`.
fn without<'a>(text: &'a str, field: &str, refused: fn(char) -> bool) -> ApiResult<&'a str> {
    if text.chars().any(refused) {
        return Err(ApiError::unprocessable(
            ErrorCode::InvalidCharacters,
            format!("{field} must not contain NUL or control characters"),
        ));
    }
    Ok(text)
}

fn required_text<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
) -> ApiResult<&'a str> {
    match body.get(field) {
        Some(Value::String(s)) if !s.trim().is_empty() && s.len() <= max_len => Ok(s),
        Some(Value::String(s)) if s.len() > max_len => Err(ApiError::unprocessable(
            ErrorCode::InvalidField,
            format!("{field} must be at most {max_len} bytes"),
        )),
        Some(_) => Err(ApiError::unprocessable(
            ErrorCode::InvalidField,
            format!("{field} must be a non-empty string"),
        )),
        None => Err(ApiError::unprocessable(
            ErrorCode::MissingField,
            format!("{field} is required"),
        )),
    }
}

/// An optional string field: absent or null is `None`, anything but a string is refused.
pub(crate) fn optional_str<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
) -> ApiResult<Option<&'a str>> {
    optional(body, field, max_len, required_str)
}

/// An optional name: [`required_name`] when present.
pub(crate) fn optional_name<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
) -> ApiResult<Option<&'a str>> {
    optional(body, field, max_len, required_name)
}

/// Absent or null is `None`; anything else must pass `required`.
fn optional<'a>(
    body: &'a Map<String, Value>,
    field: &str,
    max_len: usize,
    required: fn(&'a Map<String, Value>, &str, usize) -> ApiResult<&'a str>,
) -> ApiResult<Option<&'a str>> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => required(body, field, max_len).map(Some),
    }
}

/// Refuses fields a request must not carry, naming them, instead of silently dropping them.
pub(crate) fn refuse_unknown(body: &Map<String, Value>, allowed: &[&str]) -> ApiResult<()> {
    match body.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(field) => Err(ApiError::unprocessable(
            ErrorCode::UnknownField,
            format!("unknown field {field}"),
        )),
        None => Ok(()),
    }
}

/// `?limit=` within `1..=max`, `default` when absent.
pub(crate) fn limit_param(req: &worker::Request, default: i64, max: i64) -> ApiResult<i64> {
    match crate::http::query_param(req, "limit") {
        None => Ok(default),
        Some(text) => match text.parse::<i64>() {
            Ok(n) if (1..=max).contains(&n) => Ok(n),
            _ => Err(ApiError::unprocessable(
                ErrorCode::InvalidLimit,
                format!("limit must be an integer from 1 to {max}"),
            )),
        },
    }
}

/// A keyset cursor `"{time}.{id}"`: the sort key of the last row of the previous page.
/// Opaque to clients, who pass back the `nextCursor` they were given.
pub(crate) struct Cursor {
    pub(crate) at: i64,
    pub(crate) id: String,
}

impl Cursor {
    pub(crate) fn encode(at: i64, id: &str) -> String {
        format!("{at}.{id}")
    }

    /// `?cursor=`, or `None` for the first page.
    pub(crate) fn from_query(req: &worker::Request) -> ApiResult<Option<Self>> {
        let Some(text) = crate::http::query_param(req, "cursor") else {
            return Ok(None);
        };
        Self::parse(&text).map(Some).ok_or_else(|| {
            ApiError::unprocessable(
                ErrorCode::InvalidCursor,
                "cursor must be a nextCursor this list returned",
            )
        })
    }

    /// Exactly what [`Cursor::encode`] writes: 1–18 digits (no sign), a dot, and 1–100 of
    /// `[A-Za-z0-9_-]`.
    fn parse(text: &str) -> Option<Self> {
        let (at, id) = text.split_once('.')?;
        let at = plain_number(at, 18)?;
        let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
        (!id.is_empty() && id.len() <= 100 && id.bytes().all(plain)).then(|| Self {
            at,
            id: id.to_owned(),
        })
    }
}

/// A non-negative integer written as 1 to `max_digits` ASCII digits only: no sign, no space,
/// nothing `str::parse` would also take (`+5`).
pub(crate) fn plain_number(text: &str, max_digits: usize) -> Option<i64> {
    let digits = !text.is_empty() && text.len() <= max_digits.min(18);
    (digits && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// The capability document from a request: `capabilities`, with the top-level fields the
/// surfaces also accept (`maxConcurrentJobs`; for enrollment `problemTypes`, `external`)
/// taking precedence, parsed with the registration defaults filled in.
pub(crate) fn capability_document(
    body: &Map<String, Value>,
    overrides: &[&str],
) -> ApiResult<CapabilityDocument> {
    let mut document = match body.get("capabilities") {
        Some(Value::Object(map)) => map.clone(),
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Err(ApiError::unprocessable(
                ErrorCode::InvalidCapabilities,
                "capabilities must be an object",
            ));
        }
    };
    if !overrides.iter().any(|field| body.contains_key(*field)) {
        return Ok(CapabilityDocument::parse(&Value::Object(document))?);
    }
    // The document is checked as sent, so a bad field in it is refused even where a top-level
    // field then replaces it; then with the replacements.
    CapabilityDocument::parse(&Value::Object(document.clone()))?;
    for field in overrides {
        if let Some(value) = body.get(*field) {
            document.insert((*field).to_owned(), value.clone());
        }
    }
    Ok(CapabilityDocument::parse(&Value::Object(document))?)
}

#[cfg(test)]
mod tests {
    use super::{required_name, required_str, Cursor};
    use edgerunner_protocol::error_code::ErrorCode;
    use serde_json::json;

    #[test]
    fn names_refuse_every_control_character_and_text_keeps_line_breaks() {
        let body = |text: &str| json!({ "f": text }).as_object().cloned().expect("object");
        for bad in [
            "\0",
            "a\0b",
            "tab\there",
            "line\nbreak",
            "\u{7f}",
            "a\u{85}b",
        ] {
            let err = required_name(&body(bad), "f", 200).expect_err(bad);
            assert_eq!(err.code(), ErrorCode::InvalidCharacters, "{bad:?}");
        }
        assert_eq!(
            required_name(&body("gpu-box 1 é"), "f", 200).ok(),
            Some("gpu-box 1 é")
        );
        assert!(required_str(&body("two\nlines\ttab"), "f", 200).is_ok());
        for bad in ["\0", "bell\u{7}"] {
            let err = required_str(&body(bad), "f", 200).expect_err(bad);
            assert_eq!(err.code(), ErrorCode::InvalidCharacters, "{bad:?}");
        }
    }

    #[test]
    fn a_cursor_reads_back_what_it_encoded() {
        let text = Cursor::encode(1_764_581_234_567, "job_0a1b");
        let cursor = Cursor::parse(&text).expect("parses");
        assert_eq!(
            (cursor.at, cursor.id.as_str()),
            (1_764_581_234_567, "job_0a1b")
        );
    }

    #[test]
    fn anything_else_is_not_a_cursor() {
        for text in [
            "",
            ".",
            "12",
            "12.",
            ".job",
            "-1.job",
            "x.job",
            "12.job 1",
            "12.jo'b",
            "12.a.b",
            "+12.job",
            "-0.job",
            " 12.job",
            "1234567890123456789.job",
        ] {
            assert!(Cursor::parse(text).is_none(), "{text:?}");
        }
    }
}
