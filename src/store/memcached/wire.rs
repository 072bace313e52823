//! Keys, commands and replies of the meta protocol, as bytes: no I/O here.
//!
//! Commands are written straight into a connection's reused write buffer,
//! and replies parsed straight out of its read buffer, so a check costs no
//! allocation and no string formatting on the wire path. The `memcache`
//! crate's own `MetaCommand` owns its key and every flag as separate heap
//! vectors (four or more allocations per command), and it has no parser
//! for a buffer holding many pipelined replies, only for one header line;
//! we use its return-code table and, for error lines, its header parser.
//!
//! Every command carries an opaque token `O<n>`, which memcached echoes
//! (on `VA`, `HD`, `EN` and `NF` alike), so the reader can prove that each
//! reply pairs with the command it takes it for.

use std::ops::Range;

use memcache::exp::{MetaResponse, ReturnCode};

use crate::policy::Window;
use crate::store::{CounterKey, KeyDigest};

/// Memcached reads a TTL above 30 days as an absolute Unix time; a longer
/// relative TTL would be taken as a date in 1970 and expire at once.
pub const MAX_RELATIVE_TTL_SECS: u64 = 30 * 24 * 60 * 60;

/// The longest reply line we accept before declaring the stream corrupt:
/// ours carry at most a return code, a length and an opaque token.
const MAX_LINE: usize = 1024;
/// The longest value a counter can have: a u64 in decimal.
const MAX_VALUE: usize = 20;

/// One meta command of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `mg <key> v`: read a counter.
    Read(CounterKey),
    /// `ma <key> N<ttl> J<n> D<n> v`: add `n`, creating the counter with `n`
    /// (auto-vivify) when it is missing; answers the value after.
    Add {
        counter: CounterKey,
        amount: u64,
        ttl: u32,
    },
    /// `ma <key> MD D<n> v`: subtract `n`, saturating at 0; `NF` when the
    /// counter is gone.
    Subtract { counter: CounterKey, amount: u64 },
    /// `md <key> k`: delete a counter (a reset). Answers `HD k<key>`, read
    /// as [`Reply::Value`] 0 (it reads 0 now), or `NF`, [`Reply::Missing`].
    Remove(CounterKey),
    /// `mn`: answers `MN`, for health checks.
    Noop,
    /// `ma <ns>:clock:<expires> N<expires> J0 D0 t`: the shared clock's
    /// probe (see `clock.rs`). Creates, once, an item whose absolute expiry
    /// `expires` (Unix seconds) is in its name, and answers its remaining
    /// TTL, `HD t<secs>`, read as [`Reply::Value`]: memcached's own Unix
    /// second is then `expires - secs`.
    ClockProbe { expires: u32 },
    /// `ma <ns>:born N0 J<now> D0 v`: when this node first answered any
    /// instance of the namespace, in Unix seconds: creates, once, an item
    /// that never expires holding `now`, and answers its value. A node that
    /// restarted or was replaced answers a later second (see `exchange.rs`).
    Born { now_s: u64 },
}

impl Command {
    /// Whether a written command whose reply was lost may have changed a
    /// counter: its outcome is then unknown, and it must not be retried.
    pub fn changes_state(&self) -> bool {
        matches!(
            self,
            Command::Add { .. } | Command::Subtract { .. } | Command::Remove(_)
        )
    }

    /// The counter and amount an addition adds; `None` for any other
    /// command. What a take-back subtracts.
    pub fn addition(&self) -> Option<(CounterKey, u64)> {
        match *self {
            Command::Add {
                counter, amount, ..
            } => Some((counter, amount)),
            _ => None,
        }
    }
}

/// What memcached answered to one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `VA`: the counter's value (a read, or the value after arithmetic).
    Value(u64),
    /// `EN` or `NF`: no such counter.
    Missing,
    /// `MN`, the answer to `mn`.
    Noop,
    /// `NS`, `EX`, a bare `HD`, or `CLIENT_ERROR`/`SERVER_ERROR` for this
    /// one command: the stream is still in step, but the command failed.
    Failed(String),
}

/// A reply and the opaque token it echoed, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    pub reply: Reply,
    pub opaque: Option<u32>,
    /// Bytes of the buffer the reply took.
    pub len: usize,
}

/// The stream cannot be read any further: the connection must be dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("memcached stream out of step: {0}")]
pub struct Desync(pub String);

/// Write the wire key of `counter`: `{namespace}:{digest}:{window_ms}.{precision}:{bucket}`.
/// ASCII with no spaces, at most 64 + 1 + 32 + 1 + 14 + 1 + 4 + 1 + 20 < 250 bytes.
pub fn write_key(namespace: &str, counter: &CounterKey, buffer: &mut Vec<u8>) {
    write_key_family(namespace, counter, buffer);
    write_number(counter.bucket, buffer);
}

/// A wire key up to its bucket: what every bucket of one key's counters of
/// one window shares.
fn write_key_family(namespace: &str, counter: &CounterKey, buffer: &mut Vec<u8>) {
    buffer.extend_from_slice(namespace.as_bytes());
    buffer.push(b':');
    buffer.extend_from_slice(&counter.digest.hex());
    buffer.push(b':');
    write_number(counter.window.window_ms(), buffer);
    buffer.push(b'.');
    write_number(u64::from(counter.window.precision()), buffer);
    buffer.push(b':');
}

/// The clock probe's key: `{namespace}:clock:{expires}`. A counter's key
/// has a 32-digit digest where this has `clock`, so they never meet.
pub fn write_probe_key(namespace: &str, expires: u32, buffer: &mut Vec<u8>) {
    buffer.extend_from_slice(namespace.as_bytes());
    buffer.extend_from_slice(b":clock:");
    write_number(u64::from(expires), buffer);
}

/// The wire key as a string, for tests and diagnostics.
pub fn key_string(namespace: &str, counter: &CounterKey) -> String {
    let mut buffer = Vec::with_capacity(96);
    write_key(namespace, counter, &mut buffer);
    // Built from a plain namespace, hex digits and numbers: always ASCII.
    String::from_utf8_lossy(&buffer).into_owned()
}

/// Append one command with opaque token `opaque`.
pub fn encode(command: &Command, namespace: &str, opaque: u32, buffer: &mut Vec<u8>) {
    Encoder::new(namespace, buffer).encode(command, opaque);
}

/// Writes one write's commands into its buffer. A check's counters of one
/// limit (its current and previous buckets) share their whole key but the
/// bucket: after the first, that part is copied from where it was written
/// instead of written again (the digest in hex, the window in decimal),
/// which was a fifth of what encoding a check cost.
pub struct Encoder<'a> {
    namespace: &'a str,
    buffer: &'a mut Vec<u8>,
    /// The last key written: whose it is, and where in the buffer its part
    /// before the bucket lies. The buffer is only appended to meanwhile.
    last_family: Option<(KeyDigest, Window, Range<usize>)>,
}

impl<'a> Encoder<'a> {
    pub fn new(namespace: &'a str, buffer: &'a mut Vec<u8>) -> Encoder<'a> {
        Encoder {
            namespace,
            buffer,
            last_family: None,
        }
    }

    /// Append one command with opaque token `opaque`.
    pub fn encode(&mut self, command: &Command, opaque: u32) {
        match command {
            Command::Read(counter) => {
                self.buffer.extend_from_slice(b"mg ");
                self.key(counter);
                self.buffer.extend_from_slice(b" v");
            }
            Command::Add {
                counter,
                amount,
                ttl,
            } => {
                self.buffer.extend_from_slice(b"ma ");
                self.key(counter);
                self.buffer.extend_from_slice(b" N");
                write_number(u64::from(*ttl), self.buffer);
                // The same number twice, formatted once.
                let mut digits = itoa::Buffer::new();
                let amount = digits.format(*amount).as_bytes();
                self.buffer.extend_from_slice(b" J");
                self.buffer.extend_from_slice(amount);
                self.buffer.extend_from_slice(b" D");
                self.buffer.extend_from_slice(amount);
                self.buffer.extend_from_slice(b" v");
            }
            Command::Subtract { counter, amount } => {
                self.buffer.extend_from_slice(b"ma ");
                self.key(counter);
                self.buffer.extend_from_slice(b" MD D");
                write_number(*amount, self.buffer);
                self.buffer.extend_from_slice(b" v");
            }
            Command::Remove(counter) => {
                self.buffer.extend_from_slice(b"md ");
                self.key(counter);
                // `k` echoes the key: the mark by which a delete's `HD` is
                // told from a bare `HD`, which no other command of ours
                // should get.
                self.buffer.extend_from_slice(b" k");
            }
            Command::ClockProbe { expires } => {
                self.buffer.extend_from_slice(b"ma ");
                write_probe_key(self.namespace, *expires, self.buffer);
                self.buffer.extend_from_slice(b" N");
                write_number(u64::from(*expires), self.buffer);
                self.buffer.extend_from_slice(b" J0 D0 t");
            }
            Command::Born { now_s } => {
                self.buffer.extend_from_slice(b"ma ");
                self.buffer.extend_from_slice(self.namespace.as_bytes());
                self.buffer.extend_from_slice(b":born N0 J");
                write_number(*now_s, self.buffer);
                self.buffer.extend_from_slice(b" D0 v");
            }
            // `mn` takes no flags, so it carries no opaque token.
            Command::Noop => {
                self.buffer.extend_from_slice(b"mn\r\n");
                return;
            }
        }
        self.buffer.extend_from_slice(b" O");
        write_number(u64::from(opaque), self.buffer);
        self.buffer.extend_from_slice(b"\r\n");
    }

    /// `counter`'s wire key (see [`write_key`]).
    fn key(&mut self, counter: &CounterKey) {
        match &self.last_family {
            Some((digest, window, family))
                if *digest == counter.digest && *window == counter.window =>
            {
                self.buffer.extend_from_within(family.clone());
            }
            _ => {
                let start = self.buffer.len();
                write_key_family(self.namespace, counter, self.buffer);
                self.last_family = Some((counter.digest, counter.window, start..self.buffer.len()));
            }
        }
        write_number(counter.bucket, self.buffer);
    }
}

/// The TTL to send for a counter that must live `ttl_secs` from `now_ms`.
pub fn ttl(ttl_secs: u64, now_ms: u64) -> u32 {
    let ttl = if ttl_secs > MAX_RELATIVE_TTL_SECS {
        now_ms / 1000 + ttl_secs
    } else {
        ttl_secs
    };
    // Windows are at most a year, so this only saturates after 2105.
    u32::try_from(ttl).unwrap_or(u32::MAX)
}

fn write_number(value: u64, buffer: &mut Vec<u8>) {
    let mut digits = itoa::Buffer::new();
    buffer.extend_from_slice(digits.format(value).as_bytes());
}

/// Parse the first reply in `buffer`: `Ok(None)` when it has not fully
/// arrived yet.
pub fn parse(buffer: &[u8]) -> Result<Option<Parsed>, Desync> {
    match parse_usual(buffer) {
        Some(parsed) => Ok(Some(parsed)),
        None => parse_any(buffer),
    }
}

/// The replies a check's commands get, whole and in their plain form:
/// `VA <n> O<t>\r\n<digits>\r\n` and `EN O<t>\r\n`, read in one pass
/// over their bytes. `None` for anything else, or anything unusual in
/// these (a value padded by a decrement, a number out of range, a reply
/// not all arrived): [`parse_any`] reads it, and what this reads it reads
/// the same (`tests::the_usual_replies_read_as_any_reply_does`, and the
/// reply fuzz target). Splitting the line into tokens and matching each
/// was two thirds of what reading a reply cost.
fn parse_usual(buffer: &[u8]) -> Option<Parsed> {
    let value_follows = match buffer.get(..3)? {
        b"VA " => true,
        b"EN " => false,
        _ => return None,
    };
    let mut at = 3;
    let length = if value_follows {
        let (length, digits) = leading_number(&buffer[at..])?;
        at += digits;
        if buffer.get(at) != Some(&b' ') {
            return None;
        }
        at += 1;
        Some(usize::try_from(length).ok().filter(|&n| n <= MAX_VALUE)?)
    } else {
        None
    };
    if buffer.get(at) != Some(&b'O') {
        return None;
    }
    let (opaque, digits) = leading_number(&buffer[at + 1..])?;
    at += 1 + digits;
    if buffer.get(at..at + 2)? != b"\r\n" {
        return None;
    }
    let opaque = u32::try_from(opaque).ok()?;
    let mut len = at + 2;
    let reply = match length {
        None => Reply::Missing,
        Some(length) => {
            let block = buffer.get(len..len + length + 2)?;
            if &block[length..] != b"\r\n" {
                return None;
            }
            let (value, digits) = leading_number(&block[..length])?;
            if digits != length {
                return None;
            }
            len += length + 2;
            Reply::Value(value)
        }
    };
    Some(Parsed {
        reply,
        opaque: Some(opaque),
        len,
    })
}

/// Whether the one-pass reading of `bytes`, when there is one, is what the
/// general one reads: the reply fuzz target holds it to this.
#[cfg(any(test, feature = "memcached"))]
pub fn readings_agree(bytes: &[u8]) -> bool {
    parse_usual(bytes).is_none_or(|quick| parse_any(bytes) == Ok(Some(quick)))
}

/// The decimal number `bytes` start with, and how many digits it took:
/// `None` without a digit, or past [`MAX_VALUE`] digits or a `u64`.
fn leading_number(bytes: &[u8]) -> Option<(u64, usize)> {
    let digits = bytes
        .iter()
        .take(MAX_VALUE + 1)
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    Some((parse_number(&bytes[..digits])?, digits))
}

/// Any reply, as [`parse`] reads it: by its line's tokens.
fn parse_any(buffer: &[u8]) -> Result<Option<Parsed>, Desync> {
    let Some(line_end) = find_crlf(buffer)? else {
        if buffer.len() > MAX_LINE {
            return Err(Desync(format!("no end of line in {} bytes", buffer.len())));
        }
        return Ok(None);
    };
    let line = &buffer[..line_end];
    let mut tokens = line.split(|&byte| byte == b' ').filter(|t| !t.is_empty());
    let code = tokens.next().unwrap_or_default();
    let code = match ReturnCode::from_wire(code) {
        Ok(code) => code,
        Err(_) => return failed_line(line, line_end),
    };
    let mut opaque = None;
    let mut length = None;
    let mut ttl = None;
    let mut echoed_key = false;
    for (index, token) in tokens.enumerate() {
        if index == 0 && code == ReturnCode::Va {
            length = Some(
                parse_number(token)
                    .filter(|&n| n as usize <= MAX_VALUE)
                    .ok_or_else(|| Desync(format!("bad value length in {}", show(line))))?
                    as usize,
            );
        } else if let Some(digits) = token.strip_prefix(b"t") {
            // `t-1` (no expiry) is not a number: the probe fails.
            ttl = parse_number(digits);
        } else if token.starts_with(b"k") {
            echoed_key = true;
        } else if let Some(digits) = token.strip_prefix(b"O") {
            opaque = Some(
                parse_number(digits)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| Desync(format!("bad opaque token in {}", show(line))))?,
            );
        }
    }
    let mut len = line_end + 2;
    let reply = match code {
        ReturnCode::Va => {
            let length = length.ok_or_else(|| Desync("VA without a length".to_owned()))?;
            let end = len + length;
            if buffer.len() < end + 2 {
                return Ok(None);
            }
            if &buffer[end..end + 2] != b"\r\n" {
                return Err(Desync("a value block not ended by CRLF".to_owned()));
            }
            // A decrement keeps the value's length and pads it with spaces.
            let digits = buffer[len..end].trim_ascii_end();
            let value = parse_number(digits);
            let text = &buffer[len..end];
            len = end + 2;
            match value {
                Some(value) => Reply::Value(value),
                // The block is framed as it should be, so the stream is in
                // step: only this command failed, not the connection.
                None => Reply::Failed(format!(
                    "a counter that is not a number: {} (is another program writing under this namespace?)",
                    show(text)
                )),
            }
        }
        ReturnCode::En | ReturnCode::Nf => Reply::Missing,
        ReturnCode::Mn => Reply::Noop,
        // Only the clock probe asks for a TTL.
        ReturnCode::Hd if ttl.is_some() => Reply::Value(ttl.unwrap_or_default()),
        // Only a delete asks for its key: deleted, the counter reads 0.
        ReturnCode::Hd if echoed_key => Reply::Value(0),
        _ => Reply::Failed(format!("memcached answered {}", show(line))),
    };
    Ok(Some(Parsed { reply, opaque, len }))
}

/// `CLIENT_ERROR`/`SERVER_ERROR` are one line each and leave the stream in
/// step; anything else unknown means we no longer know where replies start.
fn failed_line(line: &[u8], line_end: usize) -> Result<Option<Parsed>, Desync> {
    match MetaResponse::parse_header(line) {
        Err(error @ (memcache::exp::Error::Rejected(_) | memcache::exp::Error::Server(_)))
            if !line.starts_with(b"ERROR") =>
        {
            Ok(Some(Parsed {
                reply: Reply::Failed(error.to_string()),
                opaque: None,
                len: line_end + 2,
            }))
        }
        _ => Err(Desync(format!("unexpected reply {}", show(line)))),
    }
}

/// Where the first line ends (the index of its CR), or a desync when a line
/// ends in a bare LF, which memcached never sends.
fn find_crlf(buffer: &[u8]) -> Result<Option<usize>, Desync> {
    match buffer.iter().position(|&byte| byte == b'\n') {
        Some(newline) if newline > 0 && buffer[newline - 1] == b'\r' => Ok(Some(newline - 1)),
        Some(_) => Err(Desync("a line not ended by CRLF".to_owned())),
        None => Ok(None),
    }
}

fn parse_number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > MAX_VALUE {
        return None;
    }
    digits.iter().try_fold(0u64, |value, &byte| {
        let digit = byte.checked_sub(b'0').filter(|&d| d <= 9)?;
        value.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

fn show(bytes: &[u8]) -> String {
    format!(
        "{:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(80)])
    )
}

#[cfg(test)]
mod tests;
