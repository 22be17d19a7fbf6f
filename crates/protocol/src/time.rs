//! Instants as Unix milliseconds, written and read as RFC 3339.
//!
//! The crate never reads a clock: callers pass `now` as a [`UnixMillis`]. The server writes
//! instants as `2026-11-30T01:11:32.123Z` (always UTC, always milliseconds); it reads what
//! clients send, which is Python's `datetime.isoformat()` with `+00:00` rewritten to `Z`
//! (`2026-11-29T07:00:00.123456Z`, or no fraction at all when the microseconds are zero), or
//! JavaScript's `toISOString()`, or any RFC 3339 text with a numeric offset.
//!
//! Timestamps inside hashed objects are hashed as the text that arrived, never re-printed:
//! [`Timestamp`] keeps that text next to the instant it denotes.

use core::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

const MILLIS_PER_DAY: i64 = 86_400_000;

/// An instant in milliseconds since 1970-01-01T00:00:00Z, between the years 1 and 9999.
///
/// The range is the one RFC 3339 can write and Python's `datetime` can read, so every value
/// formats, and every formatted value parses back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(i64);

impl UnixMillis {
    /// 0001-01-01T00:00:00.000Z.
    pub const MIN: Self = Self(-62_135_596_800_000);
    /// 9999-12-31T23:59:59.999Z.
    pub const MAX: Self = Self(253_402_300_799_999);

    pub fn new(millis: i64) -> Result<Self, TimeError> {
        if (Self::MIN.0..=Self::MAX.0).contains(&millis) {
            Ok(Self(millis))
        } else {
            Err(TimeError::OutOfRange)
        }
    }

    pub fn get(self) -> i64 {
        self.0
    }

    /// `self + millis`, or `None` outside the representable years.
    pub fn checked_add_millis(self, millis: i64) -> Option<Self> {
        self.0
            .checked_add(millis)
            .and_then(|sum| Self::new(sum).ok())
    }

    /// `self + seconds`, or `None` outside the representable years.
    pub fn checked_add_seconds(self, seconds: i64) -> Option<Self> {
        seconds
            .checked_mul(1000)
            .and_then(|millis| self.checked_add_millis(millis))
    }

    /// `2026-11-30T01:11:32.123Z`: UTC, with exactly three fractional digits.
    pub fn to_rfc3339(self) -> String {
        let days = self.0.div_euclid(MILLIS_PER_DAY);
        let in_day = self.0.rem_euclid(MILLIS_PER_DAY);
        let (year, month, day) = civil_from_days(days);
        let seconds = in_day / 1000;
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60,
            in_day % 1000
        )
    }

    /// Reads `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`.
    ///
    /// The fraction may have 1 to 9 digits; digits beyond milliseconds are dropped (rounding
    /// toward the past), which moves an instant by less than a millisecond. Like Python's
    /// `datetime`, a leap second (`:60`) is refused. A timestamp without an offset is refused:
    /// its meaning would depend on the reader's local time zone.
    pub fn parse_rfc3339(text: &str) -> Result<Self, TimeError> {
        let mut cursor = Cursor {
            bytes: text.as_bytes(),
            at: 0,
        };
        let year = cursor.digits(4, "a four-digit year")?;
        cursor.expect(b'-', "`-` after the year")?;
        let month = cursor.digits(2, "a two-digit month")?;
        cursor.expect(b'-', "`-` after the month")?;
        let day = cursor.digits(2, "a two-digit day")?;
        cursor.expect_any(b"Tt", "`T` between date and time")?;
        let hour = cursor.digits(2, "a two-digit hour")?;
        cursor.expect(b':', "`:` after the hour")?;
        let minute = cursor.digits(2, "two-digit minutes")?;
        cursor.expect(b':', "`:` after the minutes")?;
        let second = cursor.digits(2, "two-digit seconds")?;
        let mut millis = 0;
        if cursor.peek() == Some(b'.') {
            cursor.at += 1;
            let start = cursor.at;
            while cursor.peek().is_some_and(|b| b.is_ascii_digit()) {
                cursor.at += 1;
            }
            let fraction = &cursor.bytes[start..cursor.at];
            if fraction.is_empty() || fraction.len() > 9 {
                return Err(TimeError::malformed("1 to 9 fractional digits"));
            }
            millis = fraction
                .iter()
                .chain(core::iter::repeat(&b'0'))
                .take(3)
                .fold(0, |acc, digit| acc * 10 + i64::from(digit - b'0'));
        }
        let offset_minutes = match cursor.next() {
            Some(b'Z' | b'z') => 0,
            Some(sign @ (b'+' | b'-')) => {
                let hours = cursor.digits(2, "a two-digit offset hour")?;
                cursor.expect(b':', "`:` in the offset")?;
                let minutes = cursor.digits(2, "two-digit offset minutes")?;
                if hours > 23 || minutes > 59 {
                    return Err(TimeError::malformed("an offset below 24 hours"));
                }
                let magnitude = hours * 60 + minutes;
                if sign == b'-' {
                    -magnitude
                } else {
                    magnitude
                }
            }
            _ => return Err(TimeError::malformed("`Z` or a `±HH:MM` offset")),
        };
        if cursor.at != cursor.bytes.len() {
            return Err(TimeError::malformed("nothing after the offset"));
        }
        if year == 0 {
            return Err(TimeError::OutOfRange);
        }
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return Err(TimeError::malformed("a calendar date that exists"));
        }
        if hour > 23 || minute > 59 || second > 59 {
            return Err(TimeError::malformed("a time of day that exists"));
        }
        let local = days_from_civil(year, month, day) * MILLIS_PER_DAY
            + ((hour * 60 + minute) * 60 + second) * 1000
            + millis;
        Self::new(local - offset_minutes * 60_000)
    }
}

impl fmt::Display for UnixMillis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// A timestamp as it was written, and the instant it denotes.
///
/// Hashes cover [`Timestamp::as_str`]; comparisons use [`Timestamp::instant`]. Serializes as the
/// original text.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Timestamp {
    text: String,
    instant: UnixMillis,
}

impl Timestamp {
    /// Keeps `text` exactly, after checking that it is an RFC 3339 timestamp.
    pub fn parse(text: &str) -> Result<Self, TimeError> {
        Ok(Self {
            instant: UnixMillis::parse_rfc3339(text)?,
            text: text.to_owned(),
        })
    }

    /// The server's own rendering of an instant.
    pub fn from_instant(instant: UnixMillis) -> Self {
        Self {
            text: instant.to_rfc3339(),
            instant,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn instant(&self) -> UnixMillis {
        self.instant
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Why a text or a number is not an instant this crate can represent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// Not an RFC 3339 timestamp; `expected` names the first thing missing.
    Malformed { expected: &'static str },
    /// A real instant, but outside the years 1 to 9999.
    OutOfRange,
}

impl TimeError {
    fn malformed(expected: &'static str) -> Self {
        Self::Malformed { expected }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Malformed { .. } => "TIMESTAMP_MALFORMED",
            Self::OutOfRange => "TIMESTAMP_OUT_OF_RANGE",
        }
    }

    /// Always 422: a bad timestamp is a malformed request.
    pub fn http_status(&self) -> u16 {
        422
    }
}

impl fmt::Display for TimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed { expected } => {
                write!(f, "not an RFC 3339 timestamp: expected {expected}")
            }
            Self::OutOfRange => f.write_str("timestamp is outside the years 1 to 9999"),
        }
    }
}

impl std::error::Error for TimeError {}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek();
        self.at += 1;
        byte
    }

    fn expect(&mut self, wanted: u8, what: &'static str) -> Result<(), TimeError> {
        self.expect_any(&[wanted], what)
    }

    fn expect_any(&mut self, wanted: &[u8], what: &'static str) -> Result<(), TimeError> {
        match self.next() {
            Some(byte) if wanted.contains(&byte) => Ok(()),
            _ => Err(TimeError::malformed(what)),
        }
    }

    fn digits(&mut self, count: usize, what: &'static str) -> Result<i64, TimeError> {
        let mut value = 0;
        for _ in 0..count {
            match self.next() {
                Some(digit @ b'0'..=b'9') => value = value * 10 + i64::from(digit - b'0'),
                _ => return Err(TimeError::malformed(what)),
            }
        }
        Ok(value)
    }
}

fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's `days_from_civil` / `civil_from_days`
// (http://howardhinnant.github.io/date_algorithms.html): exact for the proleptic Gregorian
// calendar, with eras of 400 years so that only integer arithmetic is needed.

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::testkit::{assert_refusal, check, Rng};

    fn parse(text: &str) -> Result<i64, TimeError> {
        UnixMillis::parse_rfc3339(text).map(UnixMillis::get)
    }

    #[test]
    fn formats_utc_with_milliseconds() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_795_914_692_123, "2026-11-29T01:11:32.123Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (UnixMillis::MIN.get(), "0001-01-01T00:00:00.000Z"),
            (UnixMillis::MAX.get(), "9999-12-31T23:59:59.999Z"),
        ];
        for (millis, text) in cases {
            let instant = UnixMillis::new(millis).expect("in range");
            assert_eq!(instant.to_rfc3339(), text);
            assert_eq!(parse(text), Ok(millis), "{text}");
        }
    }

    #[test]
    fn reads_what_python_and_javascript_write() {
        // datetime(2026, 11, 29, 7, 0, 0, 123456, timezone.utc).timestamp() == 1795935600.123456
        assert_eq!(parse("2026-11-29T07:00:00.123456Z"), Ok(1_795_935_600_123));
        assert_eq!(
            parse("2026-11-29T07:00:00.123456+00:00"),
            Ok(1_795_935_600_123)
        );
        assert_eq!(parse("2026-11-29T07:00:00Z"), Ok(1_795_935_600_000));
        assert_eq!(parse("2026-11-29T07:00:00.1Z"), Ok(1_795_935_600_100));
        assert_eq!(
            parse("2026-11-29T07:00:00.999999999Z"),
            Ok(1_795_935_600_999)
        );
        assert_eq!(parse("2026-11-29t07:00:00z"), Ok(1_795_935_600_000));
    }

    #[test]
    fn applies_numeric_offsets() {
        assert_eq!(parse("2026-11-29T09:30:00+02:30"), Ok(1_795_935_600_000));
        assert_eq!(parse("2026-11-29T02:00:00-05:00"), Ok(1_795_935_600_000));
        assert_eq!(parse("2026-11-29T07:00:00-00:00"), Ok(1_795_935_600_000));
    }

    #[test]
    fn refuses_what_is_not_rfc_3339() {
        for text in [
            "",
            "2026-11-29",
            "2026-11-29T07:00:00",
            "2026-11-29 07:00:00Z",
            "2026-11-29T07:00Z",
            "2026-11-29T07:00:00.Z",
            "2026-11-29T07:00:00.1234567890Z",
            "2026-11-29T07:00:00+0000",
            "2026-11-29T07:00:00+24:00",
            "2026-11-29T07:00:00Zjunk",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-04-31T00:00:00Z",
            "2026-11-29T24:00:00Z",
            "2026-11-29T07:60:00Z",
            "2026-11-29T07:00:60Z",
            "26-11-29T07:00:00Z",
            "２026-11-29T07:00:00Z",
        ] {
            assert!(
                matches!(parse(text), Err(TimeError::Malformed { .. })),
                "{text:?} parsed"
            );
        }
        assert_eq!(parse("0000-01-01T00:00:00Z"), Err(TimeError::OutOfRange));
        assert_eq!(
            parse("0001-01-01T00:00:00+00:01"),
            Err(TimeError::OutOfRange)
        );
        assert_eq!(
            UnixMillis::new(UnixMillis::MAX.get() + 1),
            Err(TimeError::OutOfRange)
        );
        assert_eq!(UnixMillis::MAX.checked_add_millis(1), None);
        assert_eq!(UnixMillis::MIN.checked_add_seconds(i64::MAX), None);
    }

    #[test]
    fn every_instant_formats_and_parses_back() {
        let span = (UnixMillis::MAX.get() - UnixMillis::MIN.get()) as u64;
        check(2000, |rng| {
            let millis = UnixMillis::MIN.get() + rng.below(span + 1) as i64;
            let instant = UnixMillis::new(millis).expect("in range");
            let text = instant.to_rfc3339();
            assert_eq!(UnixMillis::parse_rfc3339(&text), Ok(instant), "{text}");
            let timestamp = Timestamp::parse(&text).expect("parses");
            assert_eq!(timestamp, Timestamp::from_instant(instant));
        });
    }

    /// A timestamp as some client might write it: the server's form, Python's microseconds,
    /// no fraction, nanoseconds, a numeric offset, lower-case separators; at the ends of the
    /// range or anywhere in it.
    fn client_timestamp(rng: &mut Rng) -> String {
        let span = (UnixMillis::MAX.get() - UnixMillis::MIN.get()) as u64;
        let millis = match rng.below(4) {
            0 => UnixMillis::MIN.get() + rng.below(1 << 27) as i64,
            1 => UnixMillis::MAX.get() - rng.below(1 << 27) as i64,
            _ => UnixMillis::MIN.get() + rng.below(span + 1) as i64,
        };
        let text = UnixMillis::new(millis).expect("in range").to_rfc3339();
        let (date_time, _) = text.split_at(19);
        let fraction = *rng.pick(&["", ".1", ".123", ".123456", ".999999999"]);
        let offset = *rng.pick(&["Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+05:30"]);
        let date_time = if rng.chance(1, 8) {
            date_time.replace('T', "t")
        } else {
            date_time.to_owned()
        };
        format!("{date_time}{fraction}{offset}")
    }

    #[test]
    fn arbitrary_text_is_a_timestamp_that_prints_back_or_a_typed_refusal() {
        let (mut accepted, mut refused) = (0, 0);
        check(1000, |rng| {
            let text = match rng.below(4) {
                0 => client_timestamp(rng),
                1 | 2 => {
                    let timestamp = client_timestamp(rng);
                    rng.edit_text(&timestamp)
                }
                _ => rng.json_string(),
            };
            match Timestamp::parse(&text) {
                Ok(timestamp) => {
                    accepted += 1;
                    assert_eq!(timestamp.as_str(), text);
                    let instant = timestamp.instant();
                    assert!((UnixMillis::MIN..=UnixMillis::MAX).contains(&instant));
                    assert_eq!(
                        UnixMillis::parse_rfc3339(&instant.to_rfc3339()),
                        Ok(instant)
                    );
                    let json = serde_json::to_string(&timestamp).expect("prints");
                    assert_eq!(
                        serde_json::from_str::<Timestamp>(&json).ok(),
                        Some(timestamp)
                    );
                }
                Err(error) => {
                    refused += 1;
                    assert_refusal(error.code(), error.http_status(), &error);
                    assert_eq!(error.http_status(), 422);
                }
            }
        });
        assert!(
            accepted > 0 && refused > 0,
            "{accepted} parsed, {refused} refused"
        );
    }

    #[test]
    fn calendar_agrees_with_day_counting() {
        let mut days = days_from_civil(1, 1, 1);
        for year in 1..=2400 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(days_from_civil(year, month, day), days);
                    assert_eq!(civil_from_days(days), (year, month, day));
                    days += 1;
                }
            }
        }
    }

    #[test]
    fn timestamp_keeps_its_text() {
        let timestamp = Timestamp::parse("2026-11-29T07:00:00.123456Z").expect("parses");
        assert_eq!(timestamp.as_str(), "2026-11-29T07:00:00.123456Z");
        assert_eq!(timestamp.instant().get(), 1_795_935_600_123);
        let json = serde_json::to_string(&timestamp).expect("serializes");
        assert_eq!(json, "\"2026-11-29T07:00:00.123456Z\"");
        let back: Timestamp = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, timestamp);
        assert!(serde_json::from_str::<Timestamp>("\"yesterday\"").is_err());
    }
}
