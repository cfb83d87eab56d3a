//! The parser and the dumper never panic, whatever the bytes.

use pttrace_core::pt::decode::{decode_packet, DecodeErrorKind, PacketDecoder};
use pttrace_core::pt::dump::{dump, dump_with, DumpOptions};
use pttrace_core::pt::encode::encode;

/// xorshift64* — enough randomness for a no-panic sweep, no extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Decode every packet of `bytes`, resyncing after errors; check offsets only move forward
/// and stay in bounds.
fn decode_all(bytes: &[u8]) -> usize {
    let mut d = PacketDecoder::new(bytes);
    let mut seen = 0;
    let mut last = 0;
    loop {
        match d.next() {
            Some(Ok(p)) => {
                assert!(p.offset >= last && p.len > 0 && p.offset + p.len <= bytes.len());
                last = p.offset + p.len;
            }
            Some(Err(e)) => {
                assert!(e.offset < bytes.len());
                if let DecodeErrorKind::Unsupported { len, .. } = e.kind {
                    assert!(e.offset + len <= bytes.len());
                    last = e.offset + len;
                }
            }
            None if d.is_halted() => {
                if d.sync_forward().is_none() {
                    break;
                }
                assert!(d.offset() >= last);
            }
            None => break,
        }
        seen += 1;
        assert!(seen <= 2 * bytes.len() + 2, "decoder made no progress");
    }
    seen
}

#[test]
fn every_one_two_and_three_byte_input_decodes_without_panic() {
    for a in 0..=255u8 {
        let _ = decode_packet(&[a], 0);
        decode_all(&[a]);
        for b in 0..=255u8 {
            let _ = decode_packet(&[a, b], 0);
            decode_all(&[a, b]);
            for c in 0..=255u8 {
                let _ = decode_packet(&[a, b, c], 0);
            }
            for c in [0x00, 0x01, 0x02, 0x7f, 0x80, 0x82, 0x88, 0xfe, 0xff] {
                decode_all(&[a, b, c]);
            }
        }
    }
}

#[test]
fn every_prefix_of_every_two_byte_opcode_padded_to_a_full_packet_decodes_without_panic() {
    // Full three-byte space for the extended opcode, whose packets are the longest.
    for b in 0..=255u8 {
        for c in 0..=255u8 {
            let mut v = vec![0x02, b, c];
            v.extend_from_slice(&[0xff; 13]);
            for n in 1..=v.len() {
                let _ = decode_packet(&v[..n], 0);
            }
        }
    }
}

#[test]
fn random_bytes_decode_and_dump_without_panic() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    for round in 0..2000 {
        let n = (rng.next() % 300) as usize;
        let mut bytes = rng.bytes(n);
        if round % 3 == 0 {
            // Sprinkle PSBs so resyncs actually happen.
            let at = if n == 0 { 0 } else { (rng.next() as usize) % n };
            let mut psb = Vec::new();
            encode(&pttrace_core::pt::packet::Packet::Psb, &mut psb);
            bytes.splice(at..at, psb);
        }
        decode_all(&bytes);
        let mut s = String::new();
        let stats = dump(&bytes, &mut s).unwrap();
        assert!(stats.packets + stats.errors + stats.unsupported <= bytes.len());
        let mut s = String::new();
        dump_with(&bytes, &mut s, DumpOptions { no_sync: true }).unwrap();
    }
}

#[test]
fn offsets_past_the_end_are_reported_not_panicked() {
    assert!(decode_packet(&[0x00], 5).is_err());
    assert!(decode_packet(&[], 0).is_err());
}
