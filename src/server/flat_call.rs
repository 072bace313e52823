//! The body nearly every call sends, `{"key":"..","policy":"..","cost":N}`,
//! read without serde.
//!
//! serde's derived reader does a map visitor, a field visitor per name and
//! a string parse per value for it, a visible share of a hot reject's
//! instructions (`bench/http_instructions.sh`); this scan does far less. It reads only a subset of JSON that
//! serde reads the same way: one object of `key`, `policy` and `cost`,
//! each at most once, in any order; strings without escapes or control
//! characters; `cost` an integer as JSON writes it that fits a `u64`; JSON
//! whitespace. Anything else (inline limits, an escape, `null`, a fault of
//! any kind) is `None`, and the caller asks serde, which answers as it
//! always did or names the fault. `api::flat_reading_agrees` holds the two
//! to the same result, in the tests below and in the request-body fuzz target.

/// The fields of a call body read flat; absent fields are `None`, as serde
/// leaves them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FlatCall<'a> {
    pub key: Option<&'a str>,
    pub policy: Option<&'a str>,
    pub cost: Option<u64>,
}

/// `body` read flat, or `None` when it is not of the shape above.
pub(crate) fn read(body: &[u8]) -> Option<FlatCall<'_>> {
    // Valid UTF-8 as a whole, once: serde refuses a body that is not (in a
    // string, or anywhere else as a syntax error), and each string is then
    // a slice of it between two quotes.
    let text = std::str::from_utf8(body).ok()?;
    let mut reader = Reader { text, at: 0 };
    let mut call = FlatCall::default();
    reader.eat(b'{')?;
    if reader.eat(b'}').is_none() {
        loop {
            // A field given twice is serde's to refuse, by name.
            match reader.plain_string()? {
                "key" if call.key.is_none() => {
                    reader.eat(b':')?;
                    call.key = Some(reader.plain_string()?);
                }
                "policy" if call.policy.is_none() => {
                    reader.eat(b':')?;
                    call.policy = Some(reader.plain_string()?);
                }
                "cost" if call.cost.is_none() => {
                    reader.eat(b':')?;
                    call.cost = Some(reader.plain_u64()?);
                }
                _ => return None,
            }
            if reader.eat(b',').is_none() {
                reader.eat(b'}')?;
                break;
            }
        }
    }
    // Nothing but whitespace may follow the object.
    reader.skip_whitespace();
    (reader.at == body.len()).then_some(call)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a [u8] {
        &self.text.as_bytes()[self.at..]
    }

    /// JSON's whitespace only: a form feed, say, is serde's to refuse.
    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.text.as_bytes().get(self.at) {
            self.at += 1;
        }
    }

    /// `byte`, after any whitespace.
    fn eat(&mut self, byte: u8) -> Option<()> {
        self.skip_whitespace();
        if self.text.as_bytes().get(self.at) != Some(&byte) {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// A string with no escape and no control character: its text is
    /// what lies between the quotes.
    fn plain_string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let length = self
            .rest()
            .iter()
            .position(|&byte| byte == b'"' || byte == b'\\' || byte < 0x20)?;
        let end = self.at + length;
        if self.text.as_bytes()[end] != b'"' {
            return None;
        }
        // Both ends are ASCII quotes, so the slice is whole characters.
        let string = self.text.get(self.at..end)?;
        self.at = end + 1;
        Some(string)
    }

    /// An integer as JSON writes it (no sign, no leading zero, no fraction
    /// or exponent) that fits a `u64`.
    fn plain_u64(&mut self) -> Option<u64> {
        self.skip_whitespace();
        let rest = self.rest();
        let digits = rest.iter().take_while(|byte| byte.is_ascii_digit()).count();
        if digits == 0 || (digits > 1 && rest[0] == b'0') {
            return None;
        }
        if let Some(b'.' | b'e' | b'E') = rest.get(digits) {
            return None;
        }
        let mut value: u64 = 0;
        for &digit in &rest[..digits] {
            value = value
                .checked_mul(10)?
                .checked_add(u64::from(digit - b'0'))?;
        }
        self.at += digits;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    use super::*;
    use crate::server::api::flat_reading_agrees;

    #[test]
    fn the_common_bodies_are_read_flat() {
        let cases: [(&str, FlatCall); 6] = [
            (
                r#"{"key":"k42","policy":"tight"}"#,
                FlatCall {
                    key: Some("k42"),
                    policy: Some("tight"),
                    cost: None,
                },
            ),
            (
                "\r\n { \"cost\" : 18446744073709551615 ,\t\"policy\":\"api\", \"key\": \"ключ 1\" } \n",
                FlatCall {
                    key: Some("ключ 1"),
                    policy: Some("api"),
                    cost: Some(u64::MAX),
                },
            ),
            (
                r#"{"key": "", "cost": 0}"#,
                FlatCall {
                    key: Some(""),
                    policy: None,
                    cost: Some(0),
                },
            ),
            ("{}", FlatCall::default()),
            (" { } ", FlatCall::default()),
            (
                r#"{"policy":"p"}"#,
                FlatCall {
                    key: None,
                    policy: Some("p"),
                    cost: None,
                },
            ),
        ];
        for (body, expected) in cases {
            assert_eq!(read(body.as_bytes()), Some(expected), "{body}");
            assert!(flat_reading_agrees(body.as_bytes()), "{body}");
        }
    }

    #[test]
    fn anything_else_goes_to_serde() {
        let bodies = [
            r#"{"key":"a\"b","policy":"p"}"#,
            r#"{"key":"a\u0062","policy":"p"}"#,
            "{\"key\":\"a\tb\",\"policy\":\"p\"}",
            r#"{"key":null,"policy":"p"}"#,
            r#"{"key":"k","policy":"p","cost":null}"#,
            r#"{"key":"k","key":"k"}"#,
            r#"{"key":"k","limits":[]}"#,
            r#"{"key":"k","costs":1}"#,
            r#"{"key":"k","cost":01}"#,
            r#"{"key":"k","cost":-1}"#,
            r#"{"key":"k","cost":1.0}"#,
            r#"{"key":"k","cost":1e2}"#,
            r#"{"key":"k","cost":18446744073709551616}"#,
            r#"{"key":"k","cost":"1"}"#,
            r#"{"key":"k",}"#,
            r#"{"key":"k"} x"#,
            r#"{"key":"k"}}"#,
            "\x0c{\"key\":\"k\"}",
            r#"{"key" "k"}"#,
            r#"{"key":5}"#,
            "[]",
            "",
            "{",
        ];
        for body in bodies {
            assert_eq!(read(body.as_bytes()), None, "{body}");
            assert!(flat_reading_agrees(body.as_bytes()), "{body}");
        }
        let invalid_utf8 = b"{\"key\":\"\xff\"}";
        assert_eq!(read(invalid_utf8), None);
    }

    /// Pieces of bodies near the common shape: names, values and
    /// whitespace, each a few that serde reads and a few it refuses.
    const NAMES: &[&str] = &[
        "\"key\"",
        "\"policy\"",
        "\"cost\"",
        "\"limits\"",
        "\"kex\"",
        "\"ke\\u0079\"",
        "key",
    ];
    const VALUES: &[&str] = &[
        "\"k42\"",
        "\"\"",
        "\"ключ 1\"",
        "\"a\\nb\"",
        "\"a\tb\"",
        "\"a\\\"",
        "0",
        "1",
        "01",
        "-1",
        "1.5",
        "1e2",
        "18446744073709551615",
        "18446744073709551616",
        "null",
        "[]",
        "{}",
        "\"1\"",
        "true",
    ];
    const SPACES: &[&str] = &["", "", " ", "\n\t\r ", "\u{c}"];
    const SEPARATORS: &[&str] = &[",", ",", ",", "", ";", ",,"];

    /// A body of up to four members, each piece drawn from the lists above.
    fn near_common_body() -> impl Strategy<Value = String> {
        let piece = |pieces: &'static [&'static str]| prop::sample::select(pieces);
        let member = (
            piece(SPACES),
            piece(NAMES),
            piece(SPACES),
            prop::sample::select(&[":", ":", ""][..]),
            piece(SPACES),
            piece(VALUES),
            piece(SEPARATORS),
        );
        let ends = prop::sample::select(&["{|}", "{|}", " {|} ", "{|", "[|]", "{|} x", "{|}}"][..]);
        (ends, prop::collection::vec(member, 0..=4)).prop_map(|(ends, members)| {
            let count = members.len();
            let inside: String = members
                .into_iter()
                .enumerate()
                .map(|(index, (a, name, b, colon, c, value, separator))| {
                    let separator = if index + 1 < count { separator } else { "" };
                    format!("{a}{name}{b}{colon}{c}{value}{separator}")
                })
                .collect();
            ends.replace('|', &inside)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]
        /// Read flat only where serde reads the same.
        #[test]
        fn the_flat_reading_agrees_with_serde(body in near_common_body()) {
            prop_assert!(flat_reading_agrees(body.as_bytes()));
        }
    }

    /// The bodies above are read flat often enough for the property to
    /// test something.
    #[test]
    fn many_near_common_bodies_are_read_flat() {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let strategy = near_common_body();
        let read_flat = (0..10_000)
            .filter(|_| {
                let body = strategy.new_tree(&mut runner).unwrap().current();
                read(body.as_bytes()).is_some()
            })
            .count();
        assert!(read_flat > 500, "only {read_flat} of 10,000 were read flat");
    }
}
