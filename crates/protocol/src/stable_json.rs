//! The canonical JSON rendering and the protocol hash `H`.
//!
//! [`stable_json`] prints exactly what the EvalGate SDK's
//! `json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)` prints for the same
//! JSON value, and [`hash`] is `H(v)`: the lowercase hex SHA-256 of those UTF-8 bytes. Every
//! checksum, payload hash and signature in the protocol is computed over this text, so it must be
//! byte-identical to the SDK's for every value a client can send (`tests/interop/hash_corpus.py`
//! checks that against the real SDK).
//!
//! # Numbers keep the lexeme they arrived with
//!
//! A number is printed as the text it was parsed from (serde_json's `arbitrary_precision`
//! feature keeps that text; this module does not compile without it). Each client hashes the
//! text *it* sends: Python prints `1e-07` and `1.0` where JavaScript prints `1e-7` and `1`, and
//! both must verify. Re-formatting through `f64` would break one of them, and would lose digits
//! of big integers. Python itself would re-render a parsed `1E5` as `100000.0`; we deliberately
//! do not, because no client hashes Python's re-rendering of its own request.
//!
//! One normalisation is unavoidable: serde_json stores an exponent as `e` followed by an explicit
//! sign, so `1E5` and `1e5` both print as `1e+5`. Neither Python (`1e+16`, `1e-07`) nor
//! JavaScript (`1e+21`, `1e-7`) ever writes an upper-case `E` or an unsigned exponent, so no
//! SDK-made document is affected; a hand-written `1E5` hashes as `1e+5`.
//!
//! Where the *server* builds a hashed value that an SDK re-parses before hashing (the signed job
//! envelope), the SDK hashes its own rendering of what it parsed, so such values must contain
//! only numbers every SDK renders unchanged: see [`is_portable_integer`].
//!
//! # Strings
//!
//! Raw UTF-8, escaping only `"`, `\` and the C0 control characters (`\n \r \t \b \f` by name,
//! the rest as `\u00XX` with lower-case hex). DEL (U+007F), U+2028 and U+2029 are printed raw,
//! as Python does. A JSON text with an unpaired surrogate escape (`"\ud800"`) is rejected by the
//! parser; the SDK could not hash such a string either (it fails to encode it as UTF-8).

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};

/// Python's `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`.
pub fn stable_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

/// `H(value)`: the lowercase hex SHA-256 of [`stable_json`]`(value)`.
pub fn hash(value: &Value) -> Sha256Hex {
    sha256_hex(stable_json(value).as_bytes())
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> Sha256Hex {
    Sha256Hex(hex::encode(Sha256::digest(bytes)))
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(number) => out.push_str(number.as_str()),
        Value::String(text) => write_string(out, text),
        Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // `Map` iterates in key order only while serde_json's `preserve_order` feature is
            // off, and any crate in the build can switch it on: sort here so that the hash never
            // depends on feature unification. Byte order of UTF-8 is code point order, which is
            // the order Python's `sort_keys` uses.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    let mut clean_from = 0;
    // Every byte that needs escaping is ASCII, so scanning bytes never splits a character.
    for (index, byte) in text.bytes().enumerate() {
        let escape: &str = match byte {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0x00..=0x1f => "",
            _ => continue,
        };
        out.push_str(&text[clean_from..index]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0x0f)]));
        } else {
            out.push_str(escape);
        }
        clean_from = index + 1;
    }
    out.push_str(&text[clean_from..]);
    out.push('"');
}

/// The largest integer every SDK re-parses exactly: the TypeScript SDK reads JSON numbers into
/// `f64`, whose integers are exact only up to 2^53 − 1.
pub const MAX_PORTABLE_INTEGER: u64 = (1 << 53) - 1;

/// Whether `number` is printed identically by every SDK after it re-parses it: an integer
/// written without fraction or exponent, not `-0`, and within ±[`MAX_PORTABLE_INTEGER`].
///
/// Python would print a parsed `1.50` as `1.5` and `-0` as `0`; JavaScript would print a parsed
/// `9007199254740993` as `9007199254740992`. A value the server signs and an SDK re-hashes may
/// contain only numbers for which this returns true.
pub fn is_portable_integer(number: &Number) -> bool {
    let text = number.as_str();
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || text == "-0" {
        return false;
    }
    digits
        .parse::<u64>()
        .is_ok_and(|magnitude| magnitude <= MAX_PORTABLE_INTEGER)
}

/// The first number inside `value` that [`is_portable_integer`] refuses, if any.
pub fn first_non_portable_number(value: &Value) -> Option<&Number> {
    match value {
        Value::Number(number) if !is_portable_integer(number) => Some(number),
        Value::Array(items) => items.iter().find_map(first_non_portable_number),
        Value::Object(map) => map.values().find_map(first_non_portable_number),
        _ => None,
    }
}

/// A lowercase hex SHA-256 digest: exactly 64 characters of `0-9a-f`.
///
/// Upper-case hex is refused rather than folded: every hash in the protocol is compared as text
/// (the SDK compares signatures with `hmac.compare_digest` on strings), so `AB…` is not `ab…`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Hex(String);

impl Sha256Hex {
    /// Accepts exactly 64 lowercase hex characters.
    pub fn parse(text: &str) -> Result<Self, Sha256HexError> {
        if text.len() != 64 {
            return Err(Sha256HexError::WrongLength { length: text.len() });
        }
        if let Some(position) = text
            .bytes()
            .position(|b| !matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(Sha256HexError::NotLowercaseHex { position });
        }
        Ok(Self(text.to_owned()))
    }

    /// The hex form of a raw digest.
    pub fn from_digest(digest: [u8; 32]) -> Self {
        Self(hex::encode(digest))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The 32 raw digest bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        // Cannot fail: `parse` admitted only 64 lowercase hex characters.
        let _ = hex::decode_to_slice(&self.0, &mut bytes);
        bytes
    }
}

impl fmt::Display for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Sha256Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Hex({})", self.0)
    }
}

impl FromStr for Sha256Hex {
    type Err = Sha256HexError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl AsRef<str> for Sha256Hex {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Serialize for Sha256Hex {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Sha256Hex {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl From<Sha256Hex> for Value {
    fn from(digest: Sha256Hex) -> Self {
        Value::String(digest.0)
    }
}

/// Why a text is not a [`Sha256Hex`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sha256HexError {
    WrongLength { length: usize },
    NotLowercaseHex { position: usize },
}

impl Sha256HexError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::WrongLength { .. } => "SHA256_HEX_WRONG_LENGTH",
            Self::NotLowercaseHex { .. } => "SHA256_HEX_NOT_LOWERCASE_HEX",
        }
    }

    /// Always 422: a hash of the wrong shape is a malformed request.
    pub fn http_status(&self) -> u16 {
        422
    }
}

impl fmt::Display for Sha256HexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongLength { length } => write!(
                f,
                "a SHA-256 hex digest has 64 characters, this one has {length}"
            ),
            Self::NotLowercaseHex { position } => write!(
                f,
                "a SHA-256 hex digest is lowercase hex; character {position} is not"
            ),
        }
    }
}

impl std::error::Error for Sha256HexError {}

/// Reads typed fields out of a received JSON object, naming the field in every error.
///
/// Hand-written rather than derived: `#[serde(flatten)]` buffers numbers in a way that breaks
/// `arbitrary_precision`, and the modules need to keep unknown fields and number lexemes exactly
/// as they arrived (they are covered by hashes).
pub(crate) struct Fields<'a> {
    map: &'a Map<String, Value>,
    prefix: &'static str,
}

/// A field that is missing or has the wrong shape; its `Display` names the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError(pub(crate) String);

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'a> Fields<'a> {
    /// `prefix` names the object in messages, e.g. `"evidence."`.
    pub(crate) fn of(value: &'a Value, prefix: &'static str) -> Result<Self, FieldError> {
        match value {
            Value::Object(map) => Ok(Self { map, prefix }),
            _ => Err(FieldError(if prefix.is_empty() {
                "the body must be a JSON object".to_owned()
            } else {
                format!("`{}` must be a JSON object", prefix.trim_end_matches('.'))
            })),
        }
    }

    pub(crate) fn map(&self) -> &'a Map<String, Value> {
        self.map
    }

    pub(crate) fn error(&self, name: &str, problem: &str) -> FieldError {
        FieldError(format!("`{}{name}` {problem}", self.prefix))
    }

    pub(crate) fn value(&self, name: &str) -> Result<&'a Value, FieldError> {
        self.map
            .get(name)
            .ok_or_else(|| self.error(name, "is missing"))
    }

    pub(crate) fn str(&self, name: &str) -> Result<&'a str, FieldError> {
        match self.value(name)? {
            Value::String(text) => Ok(text),
            _ => Err(self.error(name, "must be a string")),
        }
    }

    /// A string, or `null` (which must be present: the SDK always sends these fields).
    pub(crate) fn nullable_str(&self, name: &str) -> Result<Option<&'a str>, FieldError> {
        match self.value(name)? {
            Value::String(text) => Ok(Some(text)),
            Value::Null => Ok(None),
            _ => Err(self.error(name, "must be a string or null")),
        }
    }

    /// A non-negative integer written as plain digits: `1.0`, `1e0` and `-0` are refused, so
    /// that printing the parsed value reproduces the hashed lexeme.
    pub(crate) fn uint(&self, name: &str) -> Result<u64, FieldError> {
        match self.value(name)? {
            Value::Number(number) => canonical_u64(number).ok_or_else(|| {
                self.error(
                    name,
                    "must be a non-negative integer written as plain digits",
                )
            }),
            _ => Err(self.error(
                name,
                "must be a non-negative integer written as plain digits",
            )),
        }
    }

    /// A string field parsed by `parse`, whose error becomes the message.
    pub(crate) fn parsed<T, E: fmt::Display>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<T, FieldError> {
        let text = self.str(name)?;
        parse(text).map_err(|error| self.error(name, &format!("is invalid: {error}")))
    }

    /// Like [`Fields::parsed`], with `null` read as `None`.
    pub(crate) fn nullable_parsed<T, E: fmt::Display>(
        &self,
        name: &str,
        parse: impl FnOnce(&str) -> Result<T, E>,
    ) -> Result<Option<T>, FieldError> {
        match self.nullable_str(name)? {
            None => Ok(None),
            Some(text) => parse(text)
                .map(Some)
                .map_err(|error| self.error(name, &format!("is invalid: {error}"))),
        }
    }
}

/// The value of a JSON number written as plain digits (no sign, fraction or exponent).
pub(crate) fn canonical_u64(number: &Number) -> Option<u64> {
    let text = number.as_str();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
pub(crate) mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use serde_json::{json, Value};

    use super::*;
    use crate::testkit::{assert_refusal, check, Rng};

    fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("test JSON parses")
    }

    #[test]
    fn sorts_keys_by_code_point_without_whitespace() {
        let value = parse(r#"{"b": 1, "a": [true, false, null], "A": {"z": {}, "y": []}}"#);
        assert_eq!(
            stable_json(&value),
            r#"{"A":{"y":[],"z":{}},"a":[true,false,null],"b":1}"#
        );
    }

    #[test]
    fn code_point_order_differs_from_utf16_order() {
        // U+FF61 sorts before U+1F600 by code point, after it by UTF-16 code unit (0xD83D).
        let value = json!({"\u{1F600}": 1, "\u{FF61}": 2, "\u{E000}": 3, "z": 4});
        assert_eq!(
            stable_json(&value),
            "{\"z\":4,\"\u{E000}\":3,\"\u{FF61}\":2,\"\u{1F600}\":1}"
        );
    }

    #[test]
    fn escapes_exactly_what_python_escapes() {
        let value =
            Value::String("\"\\/\n\r\t\u{8}\u{c}\u{0}\u{1}\u{1f}\u{7f}\u{2028}\u{2029}é😀".into());
        assert_eq!(
            stable_json(&value),
            "\"\\\"\\\\/\\n\\r\\t\\b\\f\\u0000\\u0001\\u001f\u{7f}\u{2028}\u{2029}é😀\""
        );
    }

    #[test]
    fn escapes_every_control_character_with_lowercase_hex() {
        for byte in 0u8..0x20 {
            let printed = stable_json(&Value::String(char::from(byte).to_string()));
            let expected = match byte {
                0x08 => "\"\\b\"".to_owned(),
                0x09 => "\"\\t\"".to_owned(),
                0x0a => "\"\\n\"".to_owned(),
                0x0c => "\"\\f\"".to_owned(),
                0x0d => "\"\\r\"".to_owned(),
                _ => format!("\"\\u{byte:04x}\""),
            };
            assert_eq!(printed, expected, "byte {byte:#x}");
        }
    }

    #[test]
    fn number_lexemes_survive_parse_and_print() {
        for lexeme in [
            "0",
            "-0",
            "-0.0",
            "1.0",
            "0.1",
            "1e-07",
            "1e+16",
            "1.5e+300",
            "5e-324",
            "123456789.123",
            "9007199254740992.0",
            "1.50",
            "100000000000000000000000000000000000000000",
            "-100000000000000000000000000000000000000000",
            "1e+400",
        ] {
            let value = parse(lexeme);
            assert_eq!(stable_json(&value), lexeme);
            let nested = parse(&format!("{{\"n\":[{lexeme}]}}"));
            assert_eq!(stable_json(&nested), format!("{{\"n\":[{lexeme}]}}"));
        }
    }

    #[test]
    fn exponent_marker_is_normalised_to_lowercase_with_sign() {
        // serde_json's arbitrary_precision stores exponents as `e` plus a sign; neither Python
        // nor JavaScript writes anything else, so this is the one documented normalisation.
        assert_eq!(stable_json(&parse("1E5")), "1e+5");
        assert_eq!(stable_json(&parse("1e5")), "1e+5");
        assert_eq!(stable_json(&parse("2.5E-3")), "2.5e-3");
    }

    #[test]
    fn unpaired_surrogate_escapes_are_rejected_by_the_parser() {
        assert!(serde_json::from_str::<Value>(r#""\ud800""#).is_err());
        assert_eq!(
            stable_json(&parse(r#""\ud83d\ude00""#)),
            "\"\u{1F600}\"",
            "a paired escape decodes to the raw character"
        );
    }

    #[test]
    fn hash_matches_the_python_sdk() {
        // hash_remote_runner_payload(...) from evalgate-sdk 3.15.0.
        assert_eq!(
            hash(&json!({})).as_str(),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        let value =
            parse(r#"{"b":[1.0,1e-07,-0.0,"é\u2028"],"a":null,"ü":{"x":10000000000000000000000}}"#);
        assert_eq!(
            hash(&value).as_str(),
            "8895012af05896c1c4f67d4b476cdfdca29e2b9c2fc33240c67bfb5642a77f76"
        );
    }

    #[test]
    fn sha256_hex_accepts_only_64_lowercase_hex() {
        let good = "a".repeat(64);
        assert_eq!(Sha256Hex::parse(&good).map(|h| h.to_string()), Ok(good));
        assert_eq!(
            Sha256Hex::parse(&"a".repeat(63)),
            Err(Sha256HexError::WrongLength { length: 63 })
        );
        let upper = format!("{}A", "a".repeat(63));
        assert_eq!(
            Sha256Hex::parse(&upper),
            Err(Sha256HexError::NotLowercaseHex { position: 63 })
        );
        assert!(Sha256Hex::parse(&"g".repeat(64)).is_err());
        assert!(Sha256Hex::parse(&"é".repeat(32)).is_err());
        let digest = sha256_hex(b"abc");
        assert_eq!(Sha256Hex::from_digest(digest.to_bytes()), digest);
        assert_eq!(
            digest.as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn portable_integers_are_those_every_sdk_reprints_unchanged() {
        for (lexeme, portable) in [
            ("0", true),
            ("7", true),
            ("-12", true),
            ("9007199254740991", true),
            ("-9007199254740991", true),
            ("9007199254740992", false),
            ("-0", false),
            ("1.0", false),
            ("1e+3", false),
            ("0.5", false),
        ] {
            let Value::Number(number) = parse(lexeme) else {
                panic!("{lexeme} is a number")
            };
            assert_eq!(is_portable_integer(&number), portable, "{lexeme}");
        }
        assert!(first_non_portable_number(&json!({"a": [1, {"b": 2}]})).is_none());
        let nested = parse(r#"{"a":[1,{"b":2.5}]}"#);
        assert_eq!(
            first_non_portable_number(&nested).map(Number::as_str),
            Some("2.5")
        );
    }

    #[test]
    fn deep_nesting_within_the_parser_limit_prints() {
        let depth = 120;
        let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert_eq!(stable_json(&parse(&text)), text);
    }

    /// A random JSON value whose numbers are written the ways clients write them.
    pub(crate) fn random_value(rng: &mut Rng, depth: u32) -> Value {
        let leaf_only = depth == 0;
        match rng.below(if leaf_only { 5 } else { 7 }) {
            0 => Value::Null,
            1 => Value::Bool(rng.chance(1, 2)),
            2 => {
                let lexeme = match rng.below(6) {
                    0 => rng.next_u64().to_string(),
                    1 => format!("-{}", rng.below(1 << 40)),
                    2 => format!("{}.{}", rng.below(1000), rng.below(1000)),
                    3 => format!("{}e-{:02}", 1 + rng.below(9), rng.below(300)),
                    4 => format!("{}{}", 1 + rng.below(9), "0".repeat(rng.below(60) as usize)),
                    _ => {
                        (*rng.pick(&["1.0", "-0.0", "1e+16", "5e-324", "1.5e+300", "0"])).to_owned()
                    }
                };
                serde_json::from_str(&lexeme).expect("generated lexeme is JSON")
            }
            3 | 4 => Value::String(rng.string(12)),
            5 => Value::Array(
                (0..rng.below(5))
                    .map(|_| random_value(rng, depth - 1))
                    .collect(),
            ),
            _ => Value::Object(
                (0..rng.below(5))
                    .map(|_| (rng.string(6), random_value(rng, depth - 1)))
                    .collect(),
            ),
        }
    }

    #[test]
    fn printing_then_parsing_gives_back_the_value() {
        check(500, |rng| {
            let value = random_value(rng, 4);
            let printed = stable_json(&value);
            let reparsed: Value = serde_json::from_str(&printed).expect("stable JSON parses");
            assert_eq!(reparsed, value, "{printed}");
        });
    }

    #[test]
    fn printing_is_idempotent_and_independent_of_input_formatting() {
        check(500, |rng| {
            let value = random_value(rng, 4);
            let printed = stable_json(&value);
            let pretty = serde_json::to_string_pretty(&value).expect("value serializes");
            let from_pretty: Value = serde_json::from_str(&pretty).expect("pretty JSON parses");
            assert_eq!(stable_json(&from_pretty), printed);
            let again: Value = serde_json::from_str(&printed).expect("stable JSON parses");
            assert_eq!(stable_json(&again), printed);
            assert_eq!(hash(&again), hash(&value));
        });
    }

    #[test]
    fn arbitrary_values_print_to_a_fixed_point_with_a_stable_hash() {
        check(300, |rng| {
            let value = rng.json(4);
            let printed = stable_json(&value);
            let reparsed: Value = serde_json::from_str(&printed).expect("stable JSON parses");
            assert_eq!(reparsed, value, "{printed}");
            assert_eq!(stable_json(&reparsed), printed);
            assert_eq!(hash(&reparsed), hash(&value));
            assert_eq!(hash(&value), sha256_hex(printed.as_bytes()));
        });
    }

    #[test]
    fn arbitrary_text_and_bytes_parse_to_values_that_print_to_a_fixed_point() {
        // The edge reads every body with `serde_json::from_slice` and hashes what it got.
        let (mut accepted, mut refused) = (0, 0);
        check(400, |rng| {
            let bytes = if rng.chance(1, 4) {
                rng.bytes(80)
            } else {
                rng.near_json().into_bytes()
            };
            let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
                refused += 1;
                return;
            };
            accepted += 1;
            let printed = stable_json(&value);
            let reparsed: Value = serde_json::from_str(&printed).expect("stable JSON parses");
            assert_eq!(stable_json(&reparsed), printed);
            assert_eq!(hash(&reparsed), hash(&value));
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} parsed, {refused} refused"
        );
    }

    #[test]
    fn number_readers_accept_only_lexemes_that_print_back_unchanged() {
        check(500, |rng| {
            let Value::Number(number) = rng.json_number() else {
                unreachable!("json_number makes numbers")
            };
            if let Some(n) = canonical_u64(&number) {
                assert_eq!(n.to_string(), number.as_str());
            }
            if is_portable_integer(&number) {
                let n: i64 = number
                    .as_str()
                    .parse()
                    .expect("a portable integer fits i64");
                assert_eq!(n.to_string(), number.as_str());
                assert!(n.unsigned_abs() <= MAX_PORTABLE_INTEGER);
            }
            let value = Value::Number(number.clone());
            assert_eq!(
                first_non_portable_number(&value).is_none(),
                is_portable_integer(&number)
            );
        });
    }

    #[test]
    fn sha256_hex_parses_only_its_own_printing_and_refuses_the_rest_typed() {
        let mut refused = 0;
        check(500, |rng| {
            let genuine = sha256_hex(&rng.next_u64().to_be_bytes());
            let text = match rng.below(3) {
                0 => rng.edit_text(genuine.as_str()),
                1 => rng.json_string(),
                _ => genuine.as_str().to_owned(),
            };
            match Sha256Hex::parse(&text) {
                Ok(parsed) => {
                    assert_eq!(parsed.as_str(), text);
                    assert_eq!(Sha256Hex::from_digest(parsed.to_bytes()), parsed);
                    let json = serde_json::to_string(&parsed).expect("prints");
                    assert_eq!(serde_json::from_str::<Sha256Hex>(&json).ok(), Some(parsed));
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert_eq!(error.http_status(), 422);
                }
            }
        });
        assert!(refused > 0);
    }

    #[test]
    fn object_keys_come_out_in_code_point_order() {
        check(300, |rng| {
            let map: Map<String, Value> = (0..rng.below(8))
                .map(|_| (rng.string(5), Value::Null))
                .collect();
            let printed = stable_json(&Value::Object(map.clone()));
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_by(|a, b| a.chars().cmp(b.chars()));
            let expected = format!(
                "{{{}}}",
                keys.iter()
                    .map(|k| format!("{}:null", stable_json(&Value::String((*k).clone()))))
                    .collect::<Vec<_>>()
                    .join(",")
            );
            assert_eq!(printed, expected);
        });
    }
}
