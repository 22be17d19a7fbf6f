//! Deterministic generators for property tests.
//!
//! A tiny seeded PRNG instead of a property-testing framework, so that the very same property
//! tests run natively and under `wasm-bindgen-test` in Node (no OS randomness, no threads).
//! Every property runs a fixed number of cases from fixed seeds; a failure names its seed.

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
