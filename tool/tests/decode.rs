//! Library-level tests of the libipt-based decoder (memory from a code
//! image, streams from libipt's encoder) and of the comparison.

mod common;

use std::rc::Rc;

use common::*;
use libipt::error::PtErrorCode;
use libipt::packet::*;
use pttrace::code_image::{encode_records, CodeImage};
use pttrace::compare::{compare_addrs, FirstMismatch};
use pttrace::decode::{decode_to_vec, DecodeError};

/// Code image where a bogus record at BASE is overridden by the program.
fn image() -> Rc<CodeImage> {
    let bogus = vec![0x0fu8; PROGRAM.len()];
    let (img, _) = CodeImage::parse(&encode_records(&[(BASE, &bogus), (BASE, PROGRAM)])).unwrap();
    Rc::new(img)
}

fn decode_with(trace: &[u8], img: &Rc<CodeImage>) -> (Vec<u64>, Vec<DecodeError>) {
    let mut errs = Vec::new();
    let (ips, st) = decode_to_vec(trace, img, 1, Some((6, 85, 4)), |e| errs.push(e.clone()));
    assert_eq!(st.errors as usize, errs.len());
    assert_eq!(st.instructions as usize, ips.len());
    (ips, errs)
}

fn decode(trace: &[u8]) -> (Vec<u64>, Vec<DecodeError>) {
    decode_with(trace, &image())
}

#[test]
fn compressed_ret_stream() {
    let (ips, errs) = decode(&stream_compressed_ret());
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, EXPECTED);
}

#[test]
fn uncompressed_ret_with_mid_stream_psb() {
    let (ips, errs) = decode(&stream_uncompressed_ret());
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, EXPECTED);
}

#[test]
fn no_cpu_config_decodes_too() {
    let (ips, st) = decode_to_vec(&stream_compressed_ret(), &image(), 1, None, |e| {
        panic!("{e:?}")
    });
    assert_eq!(ips, EXPECTED);
    assert_eq!(st.errors, 0);
}

#[test]
fn code_image_split_across_records() {
    // The program in three adjacent/overlapping pieces, plus an unrelated one.
    let (img, _) = CodeImage::parse(&encode_records(&[
        (BASE + 0x10, &PROGRAM[0x10..]),
        (BASE, &PROGRAM[..0x08]),
        (BASE + 0x05, &PROGRAM[0x05..0x12]),
        (0x7f00_0000_0000, &[0x90, 0xc3]),
    ]))
    .unwrap();
    assert_eq!(img.segments().len(), 2);
    let (ips, errs) = decode_with(&stream_compressed_ret(), &Rc::new(img));
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, EXPECTED);
}

/// When the trace just stops, libipt still returns the last instruction
/// together with -pte_eos; like ptxed we print it (the libipt crate's
/// InsnDecoder would drop it). No error is reported for a clean end.
#[test]
fn trace_ending_without_pgd_keeps_last_instruction() {
    let t = encode(|e| {
        prologue(e)?;
        e.next(Tnt8::new(0b1101, 4))?;
        e.next(Tip::new(0x1020, Compression::Update16))?;
        Ok(())
    });
    let (ips, errs) = decode(&t);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, EXPECTED); // includes the syscall at 401021

    // Out of TNT bits after the first taken jnz: that jnz is the last one.
    let t = encode(|e| {
        prologue(e)?;
        e.next(Tnt8::new(0b1, 1))?;
        Ok(())
    });
    let (ips, errs) = decode(&t);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, &EXPECTED[..5]);
}

#[test]
fn trailing_pads_and_status_only_psb_are_clean() {
    let mut t = stream_compressed_ret();
    t.extend_from_slice(&[0, 0, 0]);
    let t2 = encode(|e| {
        e.next(Psb::new())?;
        e.next(Psbend::new())?;
        Ok(())
    });
    t.extend_from_slice(&t2);
    let (ips, errs) = decode(&t);
    assert!(errs.is_empty(), "{errs:?}");
    assert_eq!(ips, EXPECTED);
}

#[test]
fn empty_stream_is_clean() {
    let (ips, errs) = decode(&[]);
    assert!(ips.is_empty() && errs.is_empty());
}

#[test]
fn garbage_without_psb_is_an_error() {
    let t: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let (ips, errs) = decode(&t);
    assert!(ips.is_empty());
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.contains("no PSB"), "{errs:?}");
}

#[test]
fn garbage_mid_stream_reports_error_and_resyncs() {
    let mut t = encode(|e| {
        prologue(e)?;
        e.next(Tnt8::new(0b1101, 4))?;
        Ok(())
    });
    let garbage_at = t.len() as u64;
    t.extend_from_slice(&[0x02, 0xff, 0x13, 0x37]); // 0x02 0xff: unknown extended opcode
    t.extend_from_slice(&stream_compressed_ret());
    let (ips, errs) = decode(&t);
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].code, Some(PtErrorCode::BadOpc));
    assert_eq!(errs[0].offset, Some(garbage_at));
    // libipt reads ahead: the error surfaces at the compressed ret, which it
    // had already decoded (printed); then the next PSB gives the full run.
    let mut want = EXPECTED[..9].to_vec();
    want.extend_from_slice(EXPECTED);
    assert_eq!(ips, want);
}

#[test]
fn trace_not_matching_code_is_an_error() {
    // A TIP where the jnz needs a TNT bit.
    let t = encode(|e| {
        prologue(e)?;
        e.next(Tip::new(0x401005, Compression::Sext48))?;
        Ok(())
    });
    let (ips, errs) = decode(&t);
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].code, Some(PtErrorCode::BadQuery));
    assert_eq!(ips, &EXPECTED[..3]);
}

#[test]
fn missing_code_is_nomap_error() {
    let (ips, errs) = decode_with(&stream_compressed_ret(), &Rc::new(CodeImage::default()));
    assert!(ips.is_empty());
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].code, Some(PtErrorCode::Nomap));
}

#[test]
fn truncated_last_packet_is_an_error() {
    let mut t = stream_compressed_ret();
    t.truncate(t.len() - 2); // drops TIP.PGD and the last byte of the TIP
    let (ips, errs) = decode(&t);
    assert_eq!(ips, &EXPECTED[..11]); // up to and including jmp rax
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.contains("truncated"), "{errs:?}");
    assert_eq!(errs[0].offset, Some(t.len() as u64 - 2));
}

#[test]
fn leading_bytes_before_psb_are_an_error() {
    let mut t = vec![0u8, 0u8]; // two PADs
    t.extend_from_slice(&stream_compressed_ret());
    let (ips, errs) = decode(&t);
    assert_eq!(ips, EXPECTED);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].message.contains("does not start with a PSB"));
}

#[test]
fn compare_detects_mismatch() {
    let (ips, _) = decode(&stream_compressed_ret());
    assert!(compare_addrs(&ips, EXPECTED).ok());
    let mut wrong = EXPECTED.to_vec();
    wrong[5] = 0x401009;
    let c = compare_addrs(&ips, &wrong);
    assert_eq!(c.mismatches, 1);
    assert_eq!(
        c.first,
        Some(FirstMismatch {
            index: 5,
            decoded: Some(0x401005),
            truth: Some(0x401009)
        })
    );
}

/// Mutated streams must never panic (libipt or our wrappers), only report errors.
#[test]
fn mutated_streams_do_not_panic() {
    let base = {
        let mut t = stream_uncompressed_ret();
        t.extend_from_slice(&stream_compressed_ret());
        t
    };
    let img = image();
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let iters: usize = std::env::var("PTTRACE_FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut total_errors = 0;
    for it in 0..iters {
        let mut t = base.clone();
        if it % 4 == 3 {
            // PSB+ followed by random bytes.
            t.truncate(32);
            t.extend((0..64).map(|_| rnd() as u8));
        }
        for _ in 0..(1 + rnd() % 4) {
            let i = (rnd() as usize) % t.len();
            match rnd() % 3 {
                0 => t[i] ^= 1 << (rnd() % 8),
                1 => t[i] = rnd() as u8,
                _ => t.truncate(i.max(1)),
            }
        }
        let (_, st) = decode_to_vec(&t, &img, 1, Some((6, 85, 4)), |_| {});
        total_errors += st.errors;
        let mut sink = Vec::new();
        let out = pttrace::dump::dump_libipt(&t, Default::default(), &mut sink, |_, _| {}).unwrap();
        total_errors += out.errors;
    }
    assert!(total_errors > 0);
}

/// `jmp .` needs no trace; libipt would decode it forever. The guard stops it.
#[test]
fn endless_direct_loop_is_cut_off() {
    let (img, _) = CodeImage::parse(&encode_records(&[(BASE, &[0xeb, 0xfe])])).unwrap();
    let (mut n, mut all_base) = (0u64, true);
    let mut errs = Vec::new();
    let st = pttrace::decode::decode_stream(
        &stream_compressed_ret(),
        &Rc::new(img),
        1,
        None,
        |ip| {
            n += 1;
            all_base &= ip == BASE;
            Ok(())
        },
        |e| errs.push(e.clone()),
    )
    .unwrap();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(
        errs[0].message.contains("without consuming trace"),
        "{errs:?}"
    );
    assert_eq!(st.instructions, n);
    assert!(n >= pttrace::decode::MAX_INSNS_WITHOUT_TRACE);
    assert!(all_base);
}
