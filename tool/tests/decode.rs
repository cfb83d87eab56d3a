//! Library-level tests of the libipt-based decoder and comparison.

mod common;

use std::rc::Rc;

use common::*;
use pttrace::code_image::{encode_records, CodeImage};
use pttrace::decode::{decode_to_vec, DecodeError};
use libipt::enc_dec_builder::Cpu;

fn image() -> Rc<CodeImage> {
    let bogus = vec![0x0fu8; PROGRAM.len()];
    let (img, _) = CodeImage::parse(&encode_records(&[(BASE, &bogus), (BASE, PROGRAM)])).unwrap();
    Rc::new(img)
}

fn decode(trace: &[u8]) -> (Vec<u64>, u64, Vec<DecodeError>) {
    let mut errs = Vec::new();
    let (ips, st) = decode_to_vec(trace, &image(), Some(Cpu::intel(6, 85, 4)), |e| errs.push(e.clone()));
    assert_eq!(st.errors as usize, errs.len());
    assert_eq!(st.instructions as usize, ips.len());
    (ips, st.errors, errs)
}

#[test]
fn explore() {
    for t in [stream_compressed_ret(), stream_uncompressed_ret()] {
        let (ips, n, errs) = decode(&t);
        eprintln!("{:x?} {n} {errs:?}", ips);
    }
}

#[test]
fn explore2() {
    let t = encode(|e| { prologue(e)?; e.next(libipt::packet::Tnt8::new(0b1101, 4))?; e.next(libipt::packet::Tip::new(0x1020, libipt::packet::Compression::Update16))?; Ok(()) });
    let (ips, n, errs) = decode(&t);
    eprintln!("{:x?} {n} {errs:?}", ips);
    let t = encode(|e| { prologue(e)?; e.next(libipt::packet::Tnt8::new(0b1, 1))?; Ok(()) });
    let (ips, n, errs) = decode(&t);
    eprintln!("{:x?} {n} {errs:?}", ips);
}
