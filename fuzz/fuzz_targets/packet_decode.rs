//! Arbitrary bytes into the PT packet decoder (core/src/pt/decode.rs), last-IP tracking and the
//! ptdump-style dumper (core/src/pt/dump.rs).
//!
//! Invariants:
//! - no panic, and the decoder always progresses: each packet lies inside the buffer, starts
//!   where the previous one ended (or at a PSB after a resync) and is non-empty;
//! - every decoded packet is valid for the encoder (`try_encode` accepts it) and re-encodes to
//!   `encoded_len` bytes that decode back to the same packet;
//! - where the wire format is canonical (everything but the bits the SDM defines as ignored or
//!   reserved-zero: MODE payload bits 4:2/4:3, CBR byte 3, TMA byte 4 and byte 6 bits 7:1, and
//!   non-minimal CYC encodings) the re-encoding is byte-identical to the input; elsewhere it is
//!   identical outside those bits;
//! - `decode_packet` at any offset (including past the end) does not panic;
//! - the dumper (with and without initial sync, fmt and io sinks) does not panic and its
//!   statistics are consistent with the decoder's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pttrace_core::pt::decode::{decode_packet, Decoded, DecodeErrorKind, PacketDecoder};
use pttrace_core::pt::dump::{dump, dump_io, dump_with, DumpOptions};
use pttrace_core::pt::encode::{encoded_len, try_encode};
use pttrace_core::pt::last_ip::LastIp;
use pttrace_core::pt::packet::Packet;

/// Bits of each wire byte that the decoder ignores for `p` (1 = ignored), or None if the
/// packet is not fixed-layout (CYC).
fn ignored_bits(p: &Packet, len: usize) -> Option<Vec<u8>> {
    let mut m = vec![0u8; len];
    match p {
        // MODE.Exec: leaf[7:5], IF[2], CS.D[1], CS.L[0]; bits 4:3 reserved.
        Packet::ModeExec { .. } => m[1] = 0b0001_1000,
        // MODE.TSX: leaf[7:5], TXAbort[1], InTX[0]; bits 4:2 reserved.
        Packet::ModeTsx { .. } => m[1] = 0b0001_1100,
        // CBR: 02 03 ratio <reserved byte>.
        Packet::Cbr { .. } => m[3] = 0xFF,
        // TMA: 02 73 CTC[7:0] CTC[15:8] <reserved> FC[7:0] <reserved 7:1 | FC[8]>.
        Packet::Tma { .. } => {
            m[4] = 0xFF;
            m[6] = 0xFE;
        }
        // PWRE: payload byte 0 holds only HW[3]. PWRX: byte 1 bits 7:4 and bytes 2-4 reserved.
        Packet::Pwre { .. } => m[2] = 0xF7,
        Packet::Pwrx { .. } => {
            m[3] = 0xF0;
            m[4] = 0xFF;
            m[5] = 0xFF;
            m[6] = 0xFF;
        }
        // CFE byte 2 bits 6:5 and EVD byte 2 bits 7:5 are reserved.
        Packet::Cfe { .. } => m[2] = 0x60,
        Packet::Evd { .. } => m[2] = 0xE0,
        Packet::Cyc { .. } => return None,
        _ => {}
    }
    Some(m)
}

fn check_packet(bytes: &[u8], d: &Decoded) {
    assert!(d.len > 0 && d.offset + d.len <= bytes.len(), "packet outside the buffer: {d:?}");
    let orig = &bytes[d.offset..d.offset + d.len];
    let mut enc = Vec::new();
    try_encode(&d.packet, &mut enc).unwrap_or_else(|e| panic!("decoded packet {:?} does not encode: {e}", d.packet));
    assert_eq!(enc.len(), encoded_len(&d.packet), "encoded_len of {:?}", d.packet);
    // The re-encoding decodes to the same packet.
    let again = decode_packet(&enc, 0).unwrap_or_else(|e| panic!("re-encoded {:?} = {enc:02x?} fails: {e}", d.packet));
    assert_eq!((again.len, again.packet), (enc.len(), d.packet), "re-encoding of {orig:02x?}");
    match ignored_bits(&d.packet, d.len) {
        Some(mask) => {
            assert_eq!(enc.len(), d.len, "{:?}: {orig:02x?} re-encoded as {enc:02x?}", d.packet);
            for i in 0..d.len {
                assert_eq!(
                    orig[i] & !mask[i],
                    enc[i] & !mask[i],
                    "{:?}: byte {i} of {orig:02x?} re-encoded as {enc:02x?}",
                    d.packet
                );
            }
            if mask.iter().all(|&b| b == 0) {
                assert_eq!(orig, &enc[..], "canonical packet {:?} did not round-trip", d.packet);
            }
        }
        // CYC: the minimal form is never longer; a minimal input round-trips exactly.
        None => {
            assert!(enc.len() <= d.len, "CYC {orig:02x?} re-encoded longer: {enc:02x?}");
            let minimal = d.len == 1 || orig[d.len - 1] >> 1 != 0;
            if minimal {
                assert_eq!(orig, &enc[..], "minimal CYC did not round-trip");
            }
        }
    }
}

fn run(bytes: &[u8]) {
    // Decoder with resync, as `pttrace dump` uses it.
    let mut dec = PacketDecoder::new(bytes);
    let mut last_ip = LastIp::new();
    let mut end = 0usize;
    let mut steps = 0usize;
    let (mut packets, mut errors, mut unsupported) = (0usize, 0usize, 0usize);
    loop {
        steps += 1;
        assert!(steps <= 2 * bytes.len() + 2, "decoder made no progress");
        match dec.next() {
            Some(Ok(d)) => {
                assert!(d.offset >= end, "packet at {} before the previous end {end}", d.offset);
                end = d.offset + d.len;
                check_packet(bytes, &d);
                packets += 1;
                match d.packet {
                    Packet::Psb | Packet::Ovf => last_ip.reset(),
                    Packet::Tip(p) | Packet::TipPge(p) | Packet::TipPgd(p) | Packet::Fup(p) => {
                        let _ = last_ip.decompress(p);
                    }
                    _ => {}
                }
            }
            Some(Err(e)) => {
                assert!(e.offset < bytes.len(), "error past the end: {e}");
                let _ = e.to_string();
                match e.kind {
                    DecodeErrorKind::Unsupported { len, .. } => {
                        assert!(len > 0 && e.offset + len <= bytes.len());
                        end = e.offset + len;
                        unsupported += 1;
                    }
                    _ => errors += 1,
                }
            }
            None if dec.is_halted() => {
                if dec.sync_forward().is_none() {
                    break;
                }
                assert!(dec.offset() >= end);
                last_ip.reset();
            }
            None => break,
        }
    }
    let _ = (packets, errors, unsupported);

    // decode_packet at arbitrary offsets.
    if let Some(&b) = bytes.first() {
        let _ = decode_packet(bytes, usize::from(b) % (bytes.len() + 2));
    }
    let _ = decode_packet(bytes, bytes.len());
    let _ = decode_packet(bytes, usize::MAX);

    // The dumper.
    let mut s = String::new();
    let st = dump(bytes, &mut s).expect("String sink never fails");
    assert!(st.packets + st.errors + st.unsupported <= bytes.len());
    assert!(st.skipped_bytes <= bytes.len());
    let mut s2 = String::new();
    let st2 = dump_with(bytes, &mut s2, DumpOptions { no_sync: true }).expect("String sink");
    assert!(st2.packets + st2.errors + st2.unsupported <= bytes.len());
    if bytes.len() >= 16 && bytes[..16] == [0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82, 0x02, 0x82] {
        // Starting at a PSB, syncing changes nothing.
        assert_eq!(s, s2, "dump with and without sync differ on a stream that starts with PSB");
    }
    let mut v = Vec::new();
    let st3 = dump_io(bytes, &mut v).expect("Vec sink never fails");
    assert_eq!(st3, st);
    assert_eq!(v, s.as_bytes());
}

fuzz_target!(|data: &[u8]| run(data));
