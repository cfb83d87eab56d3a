//! End-to-end tests of `pttrace rtit-dump`, `pttrace rtit-decode` and `pttrace compare` on Atom
//! RTIT output directories. The streams come from pttrace-core's RTIT model driven by the same
//! user-mode sequencer as the plugin (blocks of the common test program).

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::*;
use pttrace::code_image::encode_records;
use pttrace_core::insn_class::classify;
use pttrace_core::pt::tracer::Context;
use pttrace_core::rtit::setup::{RtitConfig, RtitStream};
use pttrace_core::rtit::RtitOptions;
use pttrace_core::user_flow::{BlockEnd, UserFlow, KERNEL_ENTRY};

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pttrace")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().expect("terminated by signal")
}

/// The RTIT stream of one thread running PROGRAM (blocks as QEMU translates them), with
/// `ctl` adjusting the user-mode default configuration.
fn rtit_stream(ctl: impl FnOnce(&mut RtitConfig)) -> Vec<u8> {
    let mut cfg = RtitConfig::user_default();
    ctl(&mut cfg);
    let mut s = RtitStream::new(cfg, RtitOptions::default(), Context::KERNEL64, KERNEL_ENTRY).unwrap();
    let mut flow = UserFlow::default();
    flow.start(&mut s);
    // (block start, its last instruction)
    let blocks = [
        (0x401000, 0x401007),
        (0x401005, 0x401007),
        (0x401005, 0x401007),
        (0x401009, 0x401009),
        (0x40101c, 0x40101c),
        (0x40100e, 0x401015),
        (0x401020, 0x401021),
    ];
    for (n, (pc, last)) in blocks.into_iter().enumerate() {
        let insn = classify(&PROGRAM[(last - BASE) as usize..], last, 64).unwrap();
        s.tracer.set_tsc(n as u64 * 100);
        flow.block(&mut s, pc, Box::leak(Box::new(BlockEnd::new(insn))), &mut |_: u64| None);
    }
    flow.finish(&mut s);
    s.take_output()
}

/// (thread, RTIT stream, truth)
type Stream<'a> = (u32, Vec<u8>, Option<&'a [u64]>);

fn rtit_dir(name: &str, meta: &str, streams: &[Stream]) -> PathBuf {
    let dir = temp_dir(name);
    std::fs::write(dir.join("meta.txt"), meta).unwrap();
    std::fs::write(dir.join("code.img"), encode_records(&[(BASE, PROGRAM)])).unwrap();
    for (n, bytes, truth) in streams {
        std::fs::write(dir.join(format!("thread-{n}.rtit")), bytes).unwrap();
        if let Some(t) = truth {
            std::fs::write(dir.join(format!("thread-{n}.truth")), hex_lines(t)).unwrap();
        }
    }
    dir
}

const META: &str = "format=pttrace-1\nmode=user\ntrace=rtit\nrtit_ctl=0x2909\nend=exit\n";

#[test]
fn rtit_decode_prints_the_flow_like_decode() {
    let dir = rtit_dir(
        "rtit-decode",
        META,
        &[(1, rtit_stream(|_| {}), None), (2, rtit_stream(|c| { c.ctl.set_cmprs_ret(false); }), None)],
    );
    let d = dir.to_str().unwrap();
    let o = run(&["rtit-decode", d]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("thread 1\n{}thread 2\n{}", hex_lines(EXPECTED), hex_lines(EXPECTED)));
    assert!(stderr(&o).contains("thread 1: 13 instructions, 0 errors"), "{}", stderr(&o));
    let o = run(&["rtit-decode", d, "--thread", "2"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), hex_lines(EXPECTED));
    let o = run(&["rtit-decode", "--thread", "3", d]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("thread-3.rtit not found"), "{}", stderr(&o));
}

#[test]
fn rtit_decode_prints_the_flow_before_an_error_and_fails() {
    let mut bytes = rtit_stream(|_| {});
    // Cut the stream inside its last packet (the FUP.PGD at the syscall).
    bytes.truncate(bytes.len() - 1);
    let dir = rtit_dir("rtit-decode-err", META, &[(1, bytes, None)]);
    let o = run(&["rtit-decode", dir.to_str().unwrap(), "--thread", "1"]);
    assert_eq!(code(&o), 1);
    assert!(stderr(&o).contains("RTIT decode error"), "{}", stderr(&o));
    assert!(hex_lines(EXPECTED).starts_with(&stdout(&o)), "{}", stdout(&o));
}

#[test]
fn compare_uses_the_rtit_decoder_for_rtit_traces() {
    let dir = rtit_dir("rtit-compare", META, &[(1, rtit_stream(|_| {}), Some(EXPECTED))]);
    let o = run(&["compare", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("compared 13 instructions, mismatches 0, decode errors 0: OK"), "{}", stdout(&o));
    // No meta.txt: thread-N.rtit streams (and no thread-N.pt) are enough to pick RTIT.
    let mut wrong = EXPECTED.to_vec();
    wrong[8] = 0x40101d;
    let dir = rtit_dir("rtit-compare-nometa", "", &[(1, rtit_stream(|_| {}), Some(&wrong))]);
    std::fs::remove_file(dir.join("meta.txt")).unwrap();
    let o = run(&["compare", dir.to_str().unwrap(), "--context", "0"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("first mismatch at index 8 (decoded 40101c, truth 40101d)"), "{}", stdout(&o));
}

#[test]
fn rtit_dump_lists_packets_and_reads_cycle_acc_from_meta() {
    let plain = rtit_stream(|_| {});
    let dir = rtit_dir("rtit-dump", META, &[(1, plain, None)]);
    let o = run(&["rtit-dump", dir.join("thread-1.rtit").to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.starts_with("00000000  c0 00 00 00 00 00 00 00 00  PSB\n"), "{out}");
    assert!(out.contains("FUP.PGE 0x401000"), "{out}");
    assert!(out.contains("TNT !!.!"), "jnz T T N and the compressed ret: {out}");
    assert!(out.lines().last().unwrap().contains("FUP.PGD 0x401023"), "{out}");
    // Cycle-accurate: CYC packets follow; without Cycle_Acc in meta.txt they are garbage.
    let cyc = rtit_stream(|c| {
        c.ctl.set_cycle_acc(true);
    });
    let dir = rtit_dir("rtit-dump-cyc", "trace=rtit\nrtit_ctl=0x290b\n", &[(1, cyc.clone(), None)]);
    let o = run(&["rtit-dump", dir.join("thread-1.rtit").to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("CYC "), "{}", stdout(&o));
    let o = run(&["rtit-decode", dir.to_str().unwrap(), "--thread", "1"]);
    assert_eq!((code(&o), stdout(&o)), (0, hex_lines(EXPECTED)), "{}", stderr(&o));
    std::fs::write(dir.join("meta.txt"), "").unwrap();
    let o = run(&["rtit-dump", dir.join("thread-1.rtit").to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let o = run(&["rtit-dump", "--cycle-acc", dir.join("thread-1.rtit").to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}
