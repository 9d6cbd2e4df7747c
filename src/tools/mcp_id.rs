//! Finding the `id` of a JSON-RPC message that is too large to be read: the bytes stream past
//! once, and only the top-level object's `"id"` value (at most [`MAX_ID_BYTES`]) is kept, so
//! an oversized request can be answered with its own id in bounded memory, wherever the
//! client put the id (the Python SDK writes it first, the TypeScript SDK after the params).

use rmcp::model::RequestId;

/// The longest `id` kept (its JSON text); a longer one is not recovered (the answer's id is
/// then `null`), so a huge id cannot make the scan hold a huge string.
pub const MAX_ID_BYTES: usize = 256;

/// What a key of the top-level object is, as far as the scan cares.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Key {
    Id,
    Method,
    Other,
}

/// A streaming scan of one line: its nesting and string state, and the top-level `id`.
#[derive(Default)]
pub struct IdScan {
    /// Open objects and arrays; the top-level object's members are at depth 1.
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// At depth 1, the next string is a key (after `{` or `,`).
    expect_key: bool,
    /// The key being read (first bytes only: "id" and "method" are all that matter).
    key: Vec<u8>,
    reading_key: bool,
    /// The key whose value comes next (after its `:`).
    value_of: Option<Key>,
    /// The `id` value's text while it is read; `None` once it turned out not to be usable.
    capture: Option<Vec<u8>>,
    capturing: bool,
    id: Option<Vec<u8>>,
    method: bool,
}

impl IdScan {
    /// Takes the next bytes of the line (without its newline).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            if self.in_string && !self.escaped && !self.reading_key && !self.capturing {
                // Inside a string nobody keeps (a file's content): jump to what can end it.
                match memchr::memchr2(b'"', b'\\', bytes) {
                    Some(i) => bytes = &bytes[i..],
                    None => return,
                }
                let (&b, rest) = bytes.split_first().unwrap_or((&b' ', &[]));
                self.string_byte(b);
                bytes = rest;
                continue;
            }
            if self.in_string {
                self.string_byte(b);
            } else {
                self.structural(b);
            }
            bytes = rest;
        }
    }

    fn keep(&mut self, b: u8) {
        if self.capturing {
            match &mut self.capture {
                Some(c) if c.len() < MAX_ID_BYTES => c.push(b),
                _ => {
                    self.capture = None;
                    self.capturing = false;
                }
            }
        }
    }

    fn string_byte(&mut self, b: u8) {
        self.keep(b);
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
            if self.reading_key {
                self.reading_key = false;
                return;
            }
        }
        if self.reading_key && self.key.len() <= 8 {
            self.key.push(b);
        }
    }

    fn structural(&mut self, b: u8) {
        if b.is_ascii_whitespace() {
            return;
        }
        let top = self.depth == 1;
        match b {
            b'"' if top && self.expect_key => {
                self.expect_key = false;
                self.reading_key = true;
                self.key.clear();
                self.in_string = true;
                return;
            }
            b':' if top && self.value_of.is_none() => {
                self.value_of = Some(match self.key.as_slice() {
                    b"id" => Key::Id,
                    b"method" => Key::Method,
                    _ => Key::Other,
                });
                if self.value_of == Some(Key::Id) {
                    self.capture = Some(Vec::new());
                    self.capturing = true;
                } else if self.value_of == Some(Key::Method) {
                    self.method = true;
                }
                return;
            }
            b',' | b'}' if top => {
                self.end_value();
                self.expect_key = b == b',';
            }
            _ => {}
        }
        if self.capturing && top && matches!(b, b'{' | b'[') {
            // An object or array is no id.
            self.capture = None;
            self.capturing = false;
        }
        self.keep(b);
        match b {
            b'"' => self.in_string = true,
            b'{' | b'[' => {
                self.depth += 1;
                self.expect_key = self.depth == 1 && b == b'{';
            }
            b'}' | b']' => self.depth = self.depth.saturating_sub(1),
            _ => {}
        }
    }

    /// A member of the top-level object ended: an `id` read whole is kept (the first one).
    fn end_value(&mut self) {
        if self.value_of == Some(Key::Id) && self.capturing && self.id.is_none() {
            self.id = self.capture.take();
        }
        self.capturing = false;
        self.capture = None;
        self.value_of = None;
    }

    /// The request's id, when the top-level object had one (a number or a string of at most
    /// [`MAX_ID_BYTES`]) and a `method` (an answer is for requests, not for the client's own
    /// responses).
    pub fn id(&self) -> Option<RequestId> {
        let raw = self.id.as_deref()?;
        if !self.method {
            return None;
        }
        serde_json::from_slice(raw).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(text: &str, chunk: usize) -> Option<String> {
        let mut scan = IdScan::default();
        for part in text.as_bytes().chunks(chunk) {
            scan.feed(part);
        }
        scan.id().map(|id| serde_json::to_string(&id).unwrap_or_default())
    }

    #[test]
    fn finds_the_top_level_id_wherever_it_is() {
        for chunk in [1, 3, 1000] {
            assert_eq!(id_of(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"id":9}}"#, chunk).as_deref(), Some("7"));
            assert_eq!(id_of(r#"{"method":"x","params":{"id":9,"a":"\"id\":5"},"id" : "r-\"1" }"#, chunk).as_deref(), Some(r#""r-\"1""#));
            assert_eq!(id_of(r#"{"method":"x","params":[{"id":1}]}"#, chunk), None);
            assert_eq!(id_of(r#"{"id":3,"result":{}}"#, chunk), None, "a response gets no answer id");
            assert_eq!(id_of(r#"{"method":"x","id":{"a":1}}"#, chunk), None);
            assert_eq!(id_of(r#"{"method":"x","id":null}"#, chunk), None);
            assert_eq!(id_of("   \t ", chunk), None);
        }
        let long = format!(r#"{{"method":"x","id":"{}"}}"#, "a".repeat(MAX_ID_BYTES));
        assert_eq!(id_of(&long, 7), None, "a huge id is not kept");
        let unterminated = format!(r#"{{"id":4,"method":"x","params":{{"content":"{}"#, "A".repeat(100_000));
        assert_eq!(id_of(&unterminated, 4096).as_deref(), Some("4"));
    }
}
