//! The JSON clients read: one serde view type per REST shape, built from the store's rows
//! (`From<&Row>`, borrowing the row), one module per surface. The store shapes no JSON.
//!
//! A body goes out through [`serde_json::Value`], whose members are sorted: the order every
//! body has always had, whatever order a view declares its fields in. A view's serialization
//! cannot fail (structs of strings, numbers, booleans and parsed JSON values, no map with a
//! key that is not a string), so `json!` may hold views.

pub(crate) mod api_keys;
pub(crate) mod custody;
pub(crate) mod enrollment;
pub(crate) mod evidence;
pub(crate) mod history;
pub(crate) mod identity;
pub(crate) mod jobs;
pub(crate) mod metrics;
pub(crate) mod queues;
pub(crate) mod releases;
pub(crate) mod retention;
pub(crate) mod runners;
pub(crate) mod service;

use serde::Serialize;
use serde_json::Value;
use worker::Response;

use crate::error::{json_response, ApiError, ApiResult};

/// The view as the JSON value a body is made of (members sorted).
pub(crate) fn to_value<T: Serialize>(view: &T) -> ApiResult<Value> {
    serde_json::to_value(view).map_err(ApiError::internal)
}

/// A response whose body is the view.
pub(crate) fn respond<T: Serialize>(status: u16, view: &T) -> ApiResult<Response> {
    json_response(status, &to_value(view)?).map_err(ApiError::from)
}

/// A view's (or a pass's report's) JSON text, members sorted, for a log line.
pub(crate) fn shown<T: Serialize>(view: &T) -> String {
    serde_json::to_value(view)
        .map(|value| value.to_string())
        .unwrap_or_else(|err| format!("(unshowable: {err})"))
}

/// JSON text the store kept (written by us from a parsed value, and CHECKed `json_valid`), as
/// the value it holds; `null` if it somehow does not parse. Number lexemes survive the round
/// trip (serde_json `arbitrary_precision`).
pub(crate) fn stored_json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn stored_json_keeps_number_lexemes_and_is_null_when_unparsable() {
        assert_eq!(stored_json(r#"{"x":1.50}"#).to_string(), r#"{"x":1.50}"#);
        assert_eq!(stored_json("{"), Value::Null);
    }

    #[test]
    fn a_body_has_its_members_sorted_whatever_the_view_declares() {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Unsorted {
            zulu: i64,
            alpha_beta: Option<&'static str>,
        }
        let value = to_value(&Unsorted {
            zulu: 1,
            alpha_beta: None,
        })
        .unwrap();
        assert_eq!(value, json!({"alphaBeta": null, "zulu": 1}));
        assert_eq!(value.to_string(), r#"{"alphaBeta":null,"zulu":1}"#);
    }
}
