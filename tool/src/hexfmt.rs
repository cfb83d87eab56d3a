//! Fast lowercase hex formatting for the (potentially ~10^7 line) address output.

use std::io::{self, Write};

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Format `v` as lowercase hex without leading zeros and without `0x`,
/// followed by a newline, into `buf`; returns the used tail of `buf`.
#[inline]
pub fn hex_line(v: u64, buf: &mut [u8; 17]) -> &[u8] {
    buf[16] = b'\n';
    let mut i = 16;
    let mut x = v;
    loop {
        i -= 1;
        buf[i] = DIGITS[(x & 0xf) as usize];
        x >>= 4;
        if x == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Write `v` as a hex line (`401a2f\n`).
#[inline]
pub fn write_hex_line<W: Write>(w: &mut W, v: u64) -> io::Result<()> {
    let mut buf = [0u8; 17];
    w.write_all(hex_line(v, &mut buf))
}

/// Parse a hex address as found in truth files: optional `0x`/`0X` prefix,
/// at most 16 hex digits, surrounding ASCII whitespace ignored.
pub fn parse_hex(s: &[u8]) -> Option<u64> {
    let s = s.trim_ascii();
    let s = if s.len() >= 2 && s[0] == b'0' && (s[1] == b'x' || s[1] == b'X') {
        &s[2..]
    } else {
        s
    };
    if s.is_empty() || s.len() > 16 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return None,
        };
        v = (v << 4) | d as u64;
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let mut b = [0u8; 17];
        assert_eq!(hex_line(0, &mut b), b"0\n");
        assert_eq!(hex_line(0x401a2f, &mut b), b"401a2f\n");
        assert_eq!(hex_line(u64::MAX, &mut b), b"ffffffffffffffff\n");
        assert_eq!(hex_line(0x7fff_0000_0010, &mut b), b"7fff00000010\n");
    }

    #[test]
    fn parses() {
        assert_eq!(parse_hex(b"401a2f"), Some(0x401a2f));
        assert_eq!(parse_hex(b"0x401A2F\r"), Some(0x401a2f));
        assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
        assert_eq!(parse_hex(b"1ffffffffffffffff"), None);
        assert_eq!(parse_hex(b""), None);
        assert_eq!(parse_hex(b"0x"), None);
        assert_eq!(parse_hex(b"40g0"), None);
    }
}
