//! Shared fixtures: a hand-assembled x86-64 program and PT streams built
//! with libipt's packet encoder.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use libipt::enc_dec_builder::PtEncoderDecoder;
use libipt::error::PtError;
use libipt::packet::*;
use pttrace::code_image::encode_records;

pub const BASE: u64 = 0x401000;

/// The test program (hand-assembled, 64-bit mode):
///
/// ```text
/// 401000: b9 03 00 00 00        mov  ecx, 3
/// 401005: ff c9                 dec  ecx              ; L:
/// 401007: 75 fc                 jnz  L                ; 401009 - 4 = 401005
/// 401009: e8 0e 00 00 00        call f                ; 40100e + 0e = 40101c
/// 40100e: 48 8d 05 0b 00 00 00  lea  rax, [rip+0xb]   ; 401015 + 0b = 401020
/// 401015: ff e0                 jmp  rax              ; indirect -> TIP
/// 401017: cc cc cc cc cc        int3 padding
/// 40101c: c3                    f: ret
/// 40101d: cc cc cc              int3 padding
/// 401020: 90                    g: nop
/// 401021: 0f 05                 syscall               ; leaves user mode -> TIP.PGD
/// ```
pub const PROGRAM: &[u8] = &[
    0xb9, 0x03, 0x00, 0x00, 0x00, // mov ecx, 3
    0xff, 0xc9, // dec ecx
    0x75, 0xfc, // jnz L
    0xe8, 0x0e, 0x00, 0x00, 0x00, // call f
    0x48, 0x8d, 0x05, 0x0b, 0x00, 0x00, 0x00, // lea rax, [rip+0xb]
    0xff, 0xe0, // jmp rax
    0xcc, 0xcc, 0xcc, 0xcc, 0xcc, // padding
    0xc3, // f: ret
    0xcc, 0xcc, 0xcc, // padding
    0x90, // g: nop
    0x0f, 0x05, // syscall
];

/// The executed instruction sequence (loop runs 3 times: jnz T, T, N).
pub const EXPECTED: &[u64] = &[
    0x401000, // mov
    0x401005, 0x401007, // dec, jnz (taken)
    0x401005, 0x401007, // dec, jnz (taken)
    0x401005, 0x401007, // dec, jnz (not taken)
    0x401009, // call f
    0x40101c, // ret
    0x40100e, // lea
    0x401015, // jmp rax
    0x401020, // nop
    0x401021, // syscall
];

/// Encode a packet stream with libipt's encoder.
pub fn encode(f: impl FnOnce(&mut Encoder<()>) -> Result<(), PtError>) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let builder = Encoder::<()>::builder();
    let builder = unsafe { builder.buffer_from_raw(buf.as_mut_ptr(), buf.len()) };
    let mut enc = builder.build().unwrap();
    f(&mut enc).unwrap();
    let n = enc.offset().unwrap() as usize;
    drop(enc);
    buf.truncate(n);
    buf
}

/// PSB+ (no FUP: tracing is still disabled), then enable at 0x401000.
pub fn prologue(e: &mut Encoder<()>) -> Result<(), PtError> {
    e.next(Psb::new())?;
    e.next(Psbend::new())?;
    e.next(Mode::new(Payload::Exec(Exec::CSL)))?;
    e.next(TipPge::new(BASE, Compression::Sext48))?;
    Ok(())
}

/// Thread with return compression: TNT "T T N" for jnz, "T" for ret,
/// TIP for jmp rax, TIP.PGD (IP suppressed) at syscall.
pub fn stream_compressed_ret() -> Vec<u8> {
    encode(|e| {
        prologue(e)?;
        e.next(Tnt8::new(0b1101, 4))?;
        e.next(Tip::new(0x1020, Compression::Update16))?;
        e.next(TipPgd::new(0, Compression::Suppressed))?;
        Ok(())
    })
}

/// Same execution without return compression: ret is a TIP; a PAD and a
/// second PSB+ (with FUP at the current IP) are inserted mid-flow.
pub fn stream_uncompressed_ret() -> Vec<u8> {
    encode(|e| {
        prologue(e)?;
        e.next(Tnt8::new(0b110, 3))?;
        e.next(Pad::new())?;
        e.next(Tip::new(0x40100e, Compression::Update32))?;
        e.next(Psb::new())?;
        e.next(Mode::new(Payload::Exec(Exec::CSL)))?;
        e.next(Fup::new(0x401015, Compression::Sext48))?;
        e.next(Psbend::new())?;
        e.next(Tip::new(0x401020, Compression::Full))?;
        e.next(TipPgd::new(0, Compression::Suppressed))?;
        Ok(())
    })
}

pub fn hex_lines(v: &[u64]) -> String {
    v.iter().map(|a| format!("{a:x}\n")).collect()
}

/// A fresh empty directory under the target's tmp dir.
pub fn temp_dir(name: &str) -> PathBuf {
    let base = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("pttrace-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).unwrap();
    base
}

/// Write a complete output directory. `code.img` first holds a bogus
/// record over the program which the later, correct record must override.
pub fn write_outdir(name: &str, threads: &[(u32, Vec<u8>, Option<String>)]) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::write(
        dir.join("meta.txt"),
        "format=pttrace-1\nmode=user\nbinary=/tmp/prog\ncpu=6/85/4\nend=exit\n",
    )
    .unwrap();
    let bogus = vec![0xccu8; PROGRAM.len()];
    let img = encode_records(&[(BASE, &bogus), (BASE, PROGRAM)]);
    std::fs::write(dir.join("code.img"), img).unwrap();
    std::fs::write(dir.join("maps.txt"), "400000 402000 0 /tmp/prog\n").unwrap();
    for (n, pt, truth) in threads {
        std::fs::write(dir.join(format!("thread-{n}.pt")), pt).unwrap();
        if let Some(t) = truth {
            std::fs::write(dir.join(format!("thread-{n}.truth")), t).unwrap();
        }
    }
    dir
}
