//! Deterministic generators for property tests.
//!
//! A tiny seeded PRNG instead of a property-testing framework, so that the very same property
//! tests run natively and under `wasm-bindgen-test` in Node (no OS randomness, no threads).
//! Every property runs a fixed number of cases from fixed seeds; a failure names its seed.
//!
//! Besides the PRNG: generators of hostile input for the parsers that face the network
//! (arbitrary JSON values with odd numbers and strings, near-JSON text, arbitrary bytes), a
//! mutator that changes one place of a valid document, and [`assert_refusal`], what every
//! refusal of client input must look like.

use core::fmt;

use serde_json::{Map, Value};

/// xorshift64* — plenty for test-case generation, never for secrets.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // A zero state would stay zero forever.
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub(crate) fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        self.below(denominator) < numerator
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    /// A string mixing ASCII, control characters, quotes, backslashes, non-BMP characters and
    /// the code points that JSON encoders most often get wrong.
    pub(crate) fn string(&mut self, max_len: u64) -> String {
        const SPECIAL: &[char] = &[
            '"',
            '\\',
            '/',
            '\n',
            '\r',
            '\t',
            '\u{8}',
            '\u{c}',
            '\u{0}',
            '\u{1f}',
            '\u{7f}',
            '\u{80}',
            '\u{2028}',
            '\u{2029}',
            '\u{feff}',
            'é',
            'ß',
            '中',
            '😀',
            '\u{10ffff}',
        ];
        let len = self.below(max_len + 1);
        (0..len)
            .map(|_| match self.below(4) {
                0 => *self.pick(SPECIAL),
                1 => char::from_u32(self.below(0x11_0000) as u32).unwrap_or('?'),
                _ => (b' ' + self.below(95) as u8) as char,
            })
            .collect()
    }
}

/// Field names of the protocol's documents, so that arbitrary objects sometimes have the
/// shape a parser looks for and get past its first check.
const KEYS: &[&str] = &[
    "jobId",
    "claimId",
    "runnerId",
    "organizationId",
    "dispatchAttempt",
    "sequence",
    "kind",
    "previousChecksum",
    "payload",
    "payloadHash",
    "checksum",
    "emittedAt",
    "status",
    "evidence",
    "completionChecksum",
    "executionKinds",
    "executionKind",
    "runtimes",
    "runtime",
    "limits",
    "cpuSeconds",
    "network",
    "mode",
    "origins",
    "tags",
    "versionId",
    "contentHash",
    "signedJob",
    "envelope",
    "claim",
    "id",
    "subject",
];

/// Strings the protocol gives meaning to, for the same reason.
const WORDS: &[&str] = &[
    "log",
    "trajectory",
    "prompt",
    "scorer",
    "succeeded",
    "cancelled",
    "deny_all",
    "allowlist",
    "https://example.com",
    "python3.12",
    "default",
    "prod",
    "hmac-sha256",
    "job_1",
    "2026-11-30T01:11:32.123Z",
    "0000000000000000000000000000000000000000000000000000000000000000",
    "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU",
];

/// Number lexemes at the edges: signed zeros, the ends of i64, u64 and 2^53, exponents that
/// overflow or underflow an f64, redundant fractions and exponents.
const ODD_NUMBERS: &[&str] = &[
    "0",
    "-0",
    "-0.0",
    "0.0",
    "1.0",
    "1.50",
    "0e0",
    "-0e-0",
    "1E5",
    "1e+5",
    "1e400",
    "-1e400",
    "1e-400",
    "5e-324",
    "9007199254740991",
    "9007199254740992",
    "-9007199254740993",
    "4294967295",
    "4294967296",
    "9223372036854775807",
    "-9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
];

/// Text that JSON parsers are known to trip on, spliced into otherwise valid JSON.
const ODD_FRAGMENTS: &[&str] = &[
    "",
    "01",
    "1.",
    ".5",
    "-",
    "1e",
    "NaN",
    "Infinity",
    "-Infinity",
    "\"\\ud800\"",
    "\"\\udc00\\ud800\"",
    "\"\\u00\"",
    "\"\\x41\"",
    "[1,]",
    "{\"a\":1,}",
    "{\"a\":1,\"a\":2}",
    "{\"a\"}",
    "\"\t\"",
    "\u{feff}",
    "true false",
    "nul",
    "/* */",
];

impl Rng {
    /// A valid JSON number lexeme: ordinary, huge, negative, fractional, in every exponent form,
    /// or one of [`ODD_NUMBERS`].
    pub(crate) fn number_lexeme(&mut self) -> String {
        let digits = |rng: &mut Rng, count: u64| -> String {
            (0..count)
                .map(|_| char::from(b'0' + rng.below(10) as u8))
                .collect()
        };
        match self.below(8) {
            0 => self.below(10).to_string(),
            1 => self.next_u64().to_string(),
            2 => format!("-{}", self.next_u64() >> self.below(64)),
            3 => {
                let length = 20 + self.below(300);
                format!("{}{}", 1 + self.below(9), digits(self, length))
            }
            4 => {
                let length = 1 + self.below(20);
                format!("{}.{}", self.below(1000), digits(self, length))
            }
            5 => {
                let mantissa = if self.chance(1, 2) {
                    self.below(100).to_string()
                } else {
                    format!("{}.{}", self.below(10), 1 + self.below(99))
                };
                let exponent = self.below(400);
                let width = 1 + self.below(3) as usize;
                format!(
                    "{}{mantissa}{}{}{exponent:0width$}",
                    self.pick(&["", "-"]),
                    self.pick(&["e", "E"]),
                    self.pick(&["", "+", "-"]),
                )
            }
            _ => (*self.pick(ODD_NUMBERS)).to_owned(),
        }
    }

    /// A JSON string: empty, control characters only, very long (past every length limit in
    /// the protocol), a protocol word, or a short mix from [`Rng::string`].
    pub(crate) fn json_string(&mut self) -> String {
        match self.below(12) {
            0 => String::new(),
            1 => (0..1 + self.below(4))
                .map(|_| char::from(self.below(0x20) as u8))
                .collect(),
            2 => {
                let unit = self.string(3);
                let unit = if unit.is_empty() {
                    "a".to_owned()
                } else {
                    unit
                };
                unit.repeat(100 + self.below(300) as usize)
            }
            3..=5 => (*self.pick(WORDS)).to_owned(),
            _ => self.string(16),
        }
    }

    /// An arbitrary JSON value at most `depth` containers deep, each holding at most five
    /// entries; numbers from [`Rng::number_lexeme`], strings from [`Rng::json_string`].
    pub(crate) fn json(&mut self, depth: u32) -> Value {
        match self.below(if depth == 0 { 4 } else { 6 }) {
            0 => Value::Null,
            1 => Value::Bool(self.chance(1, 2)),
            2 => self.json_number(),
            3 => Value::String(self.json_string()),
            4 => Value::Array((0..self.below(6)).map(|_| self.json(depth - 1)).collect()),
            _ => Value::Object(
                (0..self.below(6))
                    .map(|_| (self.json_key(), self.json(depth - 1)))
                    .collect(),
            ),
        }
    }

    pub(crate) fn json_number(&mut self) -> Value {
        let lexeme = self.number_lexeme();
        serde_json::from_str(&lexeme)
            .unwrap_or_else(|error| panic!("{lexeme} is a JSON number: {error}"))
    }

    fn json_key(&mut self) -> String {
        if self.chance(1, 2) {
            (*self.pick(KEYS)).to_owned()
        } else {
            self.json_string()
        }
    }

    /// Up to `max_len` arbitrary bytes, often not UTF-8, weighted towards JSON punctuation.
    pub(crate) fn bytes(&mut self, max_len: u64) -> Vec<u8> {
        (0..self.below(max_len + 1))
            .map(|_| match self.below(3) {
                0 => *self.pick(b"{}[]\":,.-+eE0123456789 \\tnulrfa"),
                _ => self.below(256) as u8,
            })
            .collect()
    }

    /// Text that is JSON, nearly JSON, or nothing like it: a value printed and then cut or
    /// edited in one place, a value with an odd fragment spliced in, nesting past the parser's
    /// depth limit, or arbitrary characters.
    pub(crate) fn near_json(&mut self) -> String {
        match self.below(6) {
            0 => {
                let value = self.json(3);
                serde_json::to_string_pretty(&value).expect("a Value prints")
            }
            1 | 2 => {
                let value = self.json(3);
                let text = serde_json::to_string(&value).expect("a Value prints");
                self.edit_text(&text)
            }
            3 => {
                let text = serde_json::to_string(&self.json(2)).expect("a Value prints");
                let at = self.char_boundary(&text);
                format!("{}{}{}", &text[..at], self.pick(ODD_FRAGMENTS), &text[at..])
            }
            4 => {
                let depth = 100 + self.below(100) as usize;
                let (open, close) = *self.pick(&[("[", "]"), ("{\"a\":", "}")]);
                let closing = if self.chance(1, 2) {
                    depth
                } else {
                    self.below(depth as u64) as usize
                };
                format!("{}0{}", open.repeat(depth), close.repeat(closing))
            }
            _ => self.string(60),
        }
    }

    /// `text` with one edit: a character replaced, deleted, inserted or doubled, a case
    /// flipped, or the text cut short.
    pub(crate) fn edit_text(&mut self, text: &str) -> String {
        let mut chars: Vec<char> = text.chars().collect();
        if chars.is_empty() {
            return self.string(4);
        }
        let at = self.below(chars.len() as u64) as usize;
        let replacement = match self.below(3) {
            0 => char::from(b'0' + self.below(10) as u8),
            1 => *self.pick(&[
                '"', '\\', ':', ',', '{', '}', '-', '+', '.', ' ', '\u{0}', 'Z', 'é',
            ]),
            _ => self.string(1).chars().next().unwrap_or('x'),
        };
        match self.below(6) {
            0 => chars[at] = replacement,
            1 => {
                chars.remove(at);
            }
            2 => chars.insert(at, replacement),
            3 => chars.insert(at, chars[at]),
            4 => {
                chars[at] = if chars[at].is_ascii_lowercase() {
                    chars[at].to_ascii_uppercase()
                } else {
                    chars[at].to_ascii_lowercase()
                }
            }
            _ => chars.truncate(at),
        }
        chars.into_iter().collect()
    }

    fn char_boundary(&mut self, text: &str) -> usize {
        let boundaries: Vec<usize> = text
            .char_indices()
            .map(|(index, _)| index)
            .chain([text.len()])
            .collect();
        *self.pick(&boundaries)
    }

    /// `document` changed in one random place: a field or element dropped, a value replaced by
    /// one of another type, by an arbitrary value or by a near miss (a number one off or
    /// re-spelled, a string cut or lengthened), or an unknown field added to an object.
    pub(crate) fn mutate(&mut self, document: &Value) -> Value {
        let mut out = document.clone();
        let mut paths = Vec::new();
        collect_paths(&out, &mut Vec::new(), &mut paths);
        let path = self.pick(&paths).clone();
        match self.below(5) {
            0 if !path.is_empty() => {
                let (last, parent) = path.split_last().expect("not the root");
                match (at_path(&mut out, parent), last) {
                    (Value::Object(map), Step::Key(key)) => {
                        map.remove(key);
                    }
                    (Value::Array(items), Step::Index(index)) => {
                        items.remove(*index);
                    }
                    _ => unreachable!("a path names its parent's own entries"),
                }
            }
            1 => {
                let target = at_path(&mut out, &path);
                *target = self.of_another_type(target);
            }
            2 => *at_path(&mut out, &path) = self.json(2),
            3 => {
                let target = at_path(&mut out, &path);
                *target = self.near_miss(target);
            }
            _ => {
                // The nearest object at or above the drawn place; the root when none is.
                let objects = (0..=path.len())
                    .rev()
                    .find(|&n| at_path(&mut out, &path[..n]).is_object());
                match objects {
                    Some(n) => {
                        let key = format!("{}{}", self.json_key(), self.below(10));
                        let value = self.json(1);
                        if let Value::Object(map) = at_path(&mut out, &path[..n]) {
                            map.insert(key, value);
                        }
                    }
                    None => out = self.json(2),
                }
            }
        }
        out
    }

    fn of_another_type(&mut self, value: &Value) -> Value {
        let kind = |v: &Value| match v {
            Value::Null => 0,
            Value::Bool(_) => 1,
            Value::Number(_) => 2,
            Value::String(_) => 3,
            Value::Array(_) => 4,
            Value::Object(_) => 5,
        };
        let wanted = (kind(value) + 1 + self.below(5)) % 6;
        match wanted {
            0 => Value::Null,
            1 => Value::Bool(self.chance(1, 2)),
            2 => self.json_number(),
            3 => match value {
                // The same content, quoted: `"1"` for `1`, `"true"` for `true`.
                Value::Number(_) | Value::Bool(_) if self.chance(1, 2) => {
                    Value::String(value.to_string())
                }
                _ => Value::String(self.json_string()),
            },
            4 => Value::Array(if self.chance(1, 2) {
                vec![value.clone()]
            } else {
                Vec::new()
            }),
            _ => Value::Object(Map::new()),
        }
    }

    fn near_miss(&mut self, value: &Value) -> Value {
        match value {
            Value::Number(number) => {
                let text = number.as_str();
                let lexeme = match self.below(5) {
                    0 => match text.parse::<i128>() {
                        Ok(n) => (n + i128::from(self.chance(1, 2)) * 2 - 1).to_string(),
                        Err(_) => "0".to_owned(),
                    },
                    1 if text.starts_with('-') => text[1..].to_owned(),
                    1 => format!("-{text}"),
                    2 => format!("{text}.0"),
                    3 => format!("{text}e0"),
                    _ => self.number_lexeme(),
                };
                serde_json::from_str(&lexeme).unwrap_or_else(|_| self.json_number())
            }
            Value::String(text) => Value::String(match self.below(4) {
                0 => self.edit_text(text),
                1 => text.to_uppercase(),
                2 => format!("{text}{}", text.repeat(1 + self.below(300) as usize)),
                _ => format!(" {text}"),
            }),
            Value::Bool(flag) => Value::Bool(!flag),
            Value::Array(items) if !items.is_empty() => {
                let mut items = items.clone();
                let index = self.below(items.len() as u64) as usize;
                let copy = items[index].clone();
                items.insert(index, copy);
                Value::Array(items)
            }
            Value::Object(map) if !map.is_empty() => Value::Object(Map::new()),
            _ => self.json(1),
        }
    }
}

/// One step from a JSON value to an entry of it.
#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn collect_paths(value: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    out.push(prefix.clone());
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                prefix.push(Step::Index(index));
                collect_paths(item, prefix, out);
                prefix.pop();
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                prefix.push(Step::Key(key.clone()));
                collect_paths(item, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn at_path<'a>(value: &'a mut Value, path: &[Step]) -> &'a mut Value {
    path.iter().fold(value, |value, step| match (value, step) {
        (Value::Object(map), Step::Key(key)) => map.get_mut(key).expect("the path exists"),
        (Value::Array(items), Step::Index(index)) => &mut items[*index],
        _ => unreachable!("the path was collected from this value"),
    })
}

/// Asserts what every refusal of client input looks like on the wire: a 4xx status, a
/// non-empty UPPER_SNAKE code (the edge sends both as they are), and a message that prints.
pub(crate) fn assert_refusal(code: &str, status: u16, error: &dyn fmt::Display) {
    assert!((400..500).contains(&status), "{code}: status {status}");
    let upper_snake = code.starts_with(|c: char| c.is_ascii_uppercase())
        && !code.ends_with('_')
        && code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    assert!(upper_snake, "code {code:?} is not UPPER_SNAKE");
    assert!(!error.to_string().is_empty(), "{code}: empty message");
}

/// Runs `property` for `cases` seeds, naming the failing seed.
pub(crate) fn check(cases: u64, mut property: impl FnMut(&mut Rng)) {
    for seed in 0..cases {
        let mut rng = Rng::new(seed + 1);
        // Without catch_unwind (unavailable on wasm32) the seed is printed before each case
        // only when a case fails; `property` panics with its own message.
        struct Guard(u64, bool);
        impl Drop for Guard {
            fn drop(&mut self) {
                if !self.1 {
                    eprintln!("property failed at seed {}", self.0);
                }
            }
        }
        let mut guard = Guard(seed + 1, false);
        property(&mut rng);
        guard.1 = true;
    }
}
