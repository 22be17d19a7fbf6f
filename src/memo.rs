//! What one isolate remembers for a while, bounded: a map from a key to the time (ms) its entry
//! ends. The Worker keeps a few such memories to skip work it can safely skip, never to decide
//! who may do what: the gate and D1 stay the authorities, and a forgotten entry only costs the
//! work it would have saved.

use std::collections::HashMap;

/// A bounded map of entries that end at a time.
#[derive(Debug)]
pub(crate) struct Expiring {
    ends: HashMap<String, i64>,
    capacity: usize,
}

impl Expiring {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            ends: HashMap::new(),
            capacity,
        }
    }

    /// Remembers `key` until `until`. When full, expired entries make room; if none has
    /// expired, `key` is not remembered (a bound an attacker cannot push past).
    pub(crate) fn remember(&mut self, key: &str, until: i64, now: i64) {
        if self.ends.len() >= self.capacity && !self.ends.contains_key(key) {
            self.ends.retain(|_, end| *end > now);
            if self.ends.len() >= self.capacity {
                return;
            }
        }
        self.ends.insert(key.to_owned(), until);
    }

    /// When `key`'s entry ends, if it is still running at `now`.
    pub(crate) fn until(&self, key: &str, now: i64) -> Option<i64> {
        self.ends.get(key).copied().filter(|end| *end > now)
    }
}

#[cfg(test)]
mod tests {
    use super::Expiring;

    #[test]
    fn an_entry_runs_until_its_end() {
        let mut memo = Expiring::new(4);
        memo.remember("a", 61_000, 1_000);
        assert_eq!(memo.until("a", 1_000), Some(61_000));
        assert_eq!(memo.until("a", 60_999), Some(61_000));
        assert_eq!(memo.until("a", 61_000), None);
        assert_eq!(memo.until("b", 1_000), None, "only that key");
    }

    #[test]
    fn the_memory_is_bounded_and_makes_room_from_expired_entries() {
        let mut memo = Expiring::new(3);
        for n in 0..3 {
            memo.remember(&format!("n{n}"), 10_000, 0);
        }
        // Full, nothing expired: the next key is not remembered.
        memo.remember("late", 10_000, 0);
        assert_eq!(memo.until("late", 0), None);
        assert_eq!(memo.until("n0", 0), Some(10_000));
        // A key already there is renewed even when full.
        memo.remember("n0", 12_000, 0);
        assert_eq!(memo.until("n0", 0), Some(12_000));
        // Once the others have expired, there is room again.
        memo.remember("later", 30_000, 20_000);
        assert_eq!(memo.until("later", 20_000), Some(30_000));
        assert_eq!(memo.until("n1", 20_000), None);
    }
}
