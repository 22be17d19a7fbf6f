//! What a job wrote, made safe to show on the operator's terminal.
//!
//! A job's output is text its own code chose: an escape sequence in it would reach the terminal
//! of whoever reads the log (retitle the window, clear the screen, move the cursor over earlier
//! lines, or on some terminals answer back as if typed). Written to a terminal, every control
//! character except tab (C0, DEL, C1) and every bidirectional override is shown as an escape
//! instead (`\x1b`, `\u{202e}`), in JSON as JSON's own escape (`\u001b`), so the line stays
//! valid JSON. Written to a pipe or a file, or with `--raw`, the text goes out as sent.

use std::borrow::Cow;

/// Whether `c` changes what a terminal shows or does rather than being shown: C0 controls but
/// tab, DEL, the C1 controls (U+0080–U+009F; U+009B is a one-character CSI), and the Unicode
/// bidirectional embeddings, overrides and isolates (which reorder what follows them).
fn hides(c: char) -> bool {
    (c.is_control() && c != '\t') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every character that [`hides`] something shown as an escape: `\x1b` (C0 and
/// DEL), `\u{9b}` (the rest) in plain text; `\u001b` in `json`, where such characters can only
/// stand inside strings (serde escapes C0 there already; DEL, C1 and the bidirectional
/// controls are left raw by JSON and escaped here).
pub fn shown(text: &str, json: bool) -> Cow<'_, str> {
    if !text.chars().any(hides) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !hides(c) {
            out.push(c);
            continue;
        }
        let code = u32::from(c);
        let escaped = match (json, code) {
            (true, _) => format!("\\u{code:04x}"),
            (false, 0..=0x7f) => format!("\\x{code:02x}"),
            (false, _) => format!("\\u{{{code:x}}}"),
        };
        out.push_str(&escaped);
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_and_tabs_pass_unchanged_and_unallocated() {
        for text in ["", "hello", "a\tb", "naïve ✓ 日本", "back\\slash"] {
            assert!(matches!(shown(text, false), Cow::Borrowed(t) if t == text));
            assert!(matches!(shown(text, true), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn escape_sequences_are_shown_not_sent() {
        // Retitle the window, clear the screen, ring the bell, a one-character CSI, DEL.
        let text = "\u{1b}]0;pwned\u{7}\u{1b}[2J ok\u{9b}31m\u{7f}\r";
        assert_eq!(
            shown(text, false),
            "\\x1b]0;pwned\\x07\\x1b[2J ok\\u{9b}31m\\x7f\\x0d"
        );
        assert!(!shown(text, false).chars().any(hides));
    }

    #[test]
    fn bidirectional_overrides_are_shown() {
        assert_eq!(
            shown("abc\u{202e}fed\u{2066}", false),
            "abc\\u{202e}fed\\u{2066}"
        );
    }

    #[test]
    fn in_json_they_become_json_escapes_and_the_line_stays_valid_json() {
        let line = serde_json::json!({ "line": "x\u{9b}2J\u{7f}\u{202e}\u{1b}" }).to_string();
        let safe = shown(&line, true);
        assert!(!safe.chars().any(hides), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back["line"], "x\u{9b}2J\u{7f}\u{202e}\u{1b}");
    }
}
