//! End-to-end tests of the `pttrace` binary on hand-built output directories.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pttrace"))
        .args(args)
        .output()
        .unwrap()
}

fn run_dir(args: &[&str], dir: &Path) -> Output {
    let mut v: Vec<&str> = args.to_vec();
    v.push(dir.to_str().unwrap());
    run(&v)
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

fn good_dir(name: &str) -> std::path::PathBuf {
    write_outdir(
        name,
        &[
            (1, stream_compressed_ret(), Some(hex_lines(EXPECTED))),
            (2, stream_uncompressed_ret(), Some(hex_lines(EXPECTED))),
        ],
    )
}

#[test]
fn decode_prints_every_thread() {
    let dir = good_dir("decode");
    let o = run(&["decode", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let want = format!(
        "thread 1\n{}thread 2\n{}",
        hex_lines(EXPECTED),
        hex_lines(EXPECTED)
    );
    assert_eq!(stdout(&o), want);
    assert!(
        stderr(&o).contains("thread 1: 13 instructions, 7 branches, 0 errors"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("thread 2: 13 instructions, 7 branches, 0 errors"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn decode_single_thread_and_summary() {
    let dir = good_dir("decode-opts");
    let o = run_dir(&["decode", "--thread", "2"], &dir);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), hex_lines(EXPECTED));

    let o = run_dir(&["decode", "--summary"], &dir);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "");
    assert!(stderr(&o).contains("thread 2: 13 instructions, 7 branches, 0 errors"));

    let o = run_dir(&["decode", "--thread", "7"], &dir);
    assert_eq!(code(&o), 2);
}

#[test]
fn compare_matching_truth_passes() {
    let dir = good_dir("compare-ok");
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("thread 1: decoded 13, truth 13, mismatches 0, decode errors 0\n"),
        "{out}"
    );
    assert!(
        out.contains("thread 2: decoded 13, truth 13, mismatches 0, decode errors 0\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "total: 2 threads, compared 26 instructions, mismatches 0, decode errors 0: OK"
        ),
        "{out}"
    );
}

#[test]
fn compare_wrong_truth_fails() {
    let mut wrong = EXPECTED.to_vec();
    wrong[5] = 0x401009;
    let dir = write_outdir(
        "compare-bad",
        &[
            (1, stream_compressed_ret(), Some(hex_lines(EXPECTED))),
            (2, stream_compressed_ret(), Some(hex_lines(&wrong))),
            (3, stream_compressed_ret(), Some(hex_lines(&EXPECTED[..12]))),
            (4, stream_compressed_ret(), None),
        ],
    );
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(
        out.contains("thread 1: decoded 13, truth 13, mismatches 0, decode errors 0\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "thread 2: decoded 13, truth 13, mismatches 1, first mismatch at index 5 (decoded 401005, truth 401009), decode errors 0\n"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "thread 3: decoded 13, truth 12, mismatches 0, first mismatch at index 12 (decoded 401021, truth <end>), decode errors 0\n"
        ),
        "{out}"
    );
    assert!(out.contains("thread 4: no truth file, skipped"), "{out}");
    assert!(
        out.contains(
            "total: 3 threads, compared 38 instructions, mismatches 1, decode errors 0: FAIL"
        ),
        "{out}"
    );

    // A single matching thread passes on its own.
    let o = run_dir(&["compare", "--thread", "1"], &dir);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn garbage_stream_fails_decode_and_compare() {
    let garbage: Vec<u8> = (0..3000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    let mut bad_mid = encode(|e| {
        prologue(e)?;
        e.next(libipt::packet::Tnt8::new(0b1101, 4))?;
        Ok(())
    });
    bad_mid.extend_from_slice(&[0x02, 0xff, 0x13, 0x37]);
    let dir = write_outdir(
        "garbage",
        &[
            (1, stream_compressed_ret(), Some(hex_lines(EXPECTED))),
            (2, garbage.clone(), Some(hex_lines(EXPECTED))),
            (3, bad_mid, None),
        ],
    );
    let o = run_dir(&["decode"], &dir);
    assert_eq!(code(&o), 1);
    let err = stderr(&o);
    assert!(
        err.contains("pttrace: thread 2: decode error at offset 0x0: no PSB found"),
        "{err}"
    );
    assert!(
        err.contains("pttrace: thread 3: decode error at offset 0x1c: unknown opcode"),
        "{err}"
    );
    assert!(err.contains("thread 2: 0 instructions, 0 branches, 1 errors"), "{err}");
    // Thread 1 is still decoded completely.
    assert!(stdout(&o).starts_with(&format!(
        "thread 1\n{}thread 2\nthread 3\n",
        hex_lines(EXPECTED)
    )));

    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("thread 2: decoded 0, truth 13, mismatches 0, first mismatch at index 0 (decoded <end>, truth 401000), decode errors 1"));

    let p = dir.join("thread-2.pt");
    let o = run(&["dump", p.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    let o = run(&[
        "dump",
        "--libipt",
        dir.join("thread-3.pt").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("000000000000001c  [error: unknown opcode"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn dump_prints_packets() {
    let dir = good_dir("dump");
    let p = dir.join("thread-1.pt");
    for args in [vec!["dump", "--libipt"]] {
        let mut a = args.clone();
        a.push(p.to_str().unwrap());
        let o = run(&a);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(
            stdout(&o),
            "\
0000000000000000  psb
0000000000000010  psbend
0000000000000012  mode.exec  cs.l
0000000000000014  tip.pge    3: ????000000401000, ip=0000000000401000
000000000000001b  tnt.8      !!.!
000000000000001c  tip        1: ????????????1020, ip=0000000000401020
000000000000001f  tip.pgd    0: ????????????????
"
        );
    }
    // The project's own packet parser, ptdump --lastip --exec-mode layout.
    let o = run(&["dump", p.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "\
0000000000000000  psb
0000000000000010  psbend
0000000000000012  mode.exec  cs.l                      em   64-bit
0000000000000014  tip.pge    3: 0000000000401000       ip   0000000000401000
000000000000001b  tnt.8      !!.!
000000000000001c  tip        1: ????????????1020       ip   0000000000401020
000000000000001f  tip.pgd    0: ????????????????       ip   <suppressed>
"
    );
    let o = run(&["dump", "--libipt", "--raw", p.to_str().unwrap()]);
    assert_eq!(code(&o), 0);
    assert!(
        stdout(&o).contains(
            "000000000000001c  tip        1: ????????????1020, ip=0000000000401020  | 2d 20 10\n"
        ),
        "{}",
        stdout(&o)
    );

    // Truncated final packet.
    let mut t = std::fs::read(&p).unwrap();
    t.truncate(t.len() - 2);
    let tp = dir.join("truncated.pt");
    std::fs::write(&tp, t).unwrap();
    let o = run(&["dump", "--libipt", tp.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(
        stdout(&o).contains("000000000000001c  [error: truncated packet: 0x2 trailing bytes]"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn code_img_problems() {
    // Truncated code.img: the complete record is still used (warning only).
    let dir = good_dir("code-trunc");
    let mut img = pttrace::code_image::encode_records(&[(BASE, PROGRAM)]);
    img.extend_from_slice(&[1, 2, 3, 4, 5]);
    std::fs::write(dir.join("code.img"), img).unwrap();
    let o = run_dir(&["decode", "--thread", "1"], &dir);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o), hex_lines(EXPECTED));
    assert!(
        stderr(&o).contains("warning: code.img: truncated record header"),
        "{}",
        stderr(&o)
    );

    // Bad magic: usage/IO error.
    std::fs::write(dir.join("code.img"), b"garbage").unwrap();
    let o = run_dir(&["decode"], &dir);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("bad magic"));

    // Missing code.img.
    std::fs::remove_file(dir.join("code.img")).unwrap();
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("code.img"));
}

#[test]
fn usage_errors() {
    let o = run(&[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--help"));
    for args in [
        &["--help"][..],
        &["-h"][..],
        &["help"][..],
        &["decode", "--help"][..],
    ] {
        let o = run(args);
        assert_eq!(code(&o), 0);
        assert!(stdout(&o).contains("pttrace decode DIR"));
    }
    for args in [
        &["frobnicate"][..],
        &["decode"][..],
        &["decode", "a", "b"][..],
        &["decode", "--thread"][..],
        &["decode", "--thread", "x", "d"][..],
        &["decode", "--bogus", "d"][..],
        &["dump", "--raw", "f"][..],
        &["compare", "--summary", "d"][..],
        &["decode", "/nonexistent/dir"][..],
        &["dump", "/nonexistent/file"][..],
    ] {
        let o = run(args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).starts_with("pttrace: "), "{args:?}");
    }
    // A directory without thread files.
    let d = temp_dir("empty");
    assert_eq!(code(&run_dir(&["decode"], &d)), 2);
    assert_eq!(code(&run_dir(&["compare"], &d)), 2);
    // A file where a directory is expected.
    let f = d.join("file");
    std::fs::write(&f, "x").unwrap();
    assert_eq!(code(&run_dir(&["decode"], &f)), 2);
}

#[test]
fn bad_truth_file_is_input_error() {
    let dir = write_outdir(
        "bad-truth",
        &[(1, stream_compressed_ret(), Some("401000\nnot-hex\n".into()))],
    );
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("line 2"), "{}", stderr(&o));
}

/// Issue 20: a run cut short (SIGKILL, disk full) has no `end=` in meta.txt; its stream stops
/// mid-packet and its truth mid-line. decode prints the flow up to the cut and warns; compare
/// compares the prefix both files hold; both exit 3.
#[test]
fn run_cut_short_decodes_its_prefix_and_exits_3() {
    let dir = good_dir("cut-short");
    let meta = std::fs::read_to_string(dir.join("meta.txt")).unwrap();
    std::fs::write(dir.join("meta.txt"), meta.replace("end=exit\n", "")).unwrap();
    // Thread 1: the stream loses its last byte; its truth is cut inside the 6th line.
    let pt = std::fs::read(dir.join("thread-1.pt")).unwrap();
    std::fs::write(dir.join("thread-1.pt"), &pt[..pt.len() - 1]).unwrap();
    let truth = hex_lines(EXPECTED);
    let cut = truth.match_indices('\n').nth(4).unwrap().0 + 3;
    std::fs::write(dir.join("thread-1.truth"), &truth[..cut]).unwrap();

    let o = run_dir(&["decode", "--thread", "1"], &dir);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(stderr(&o).contains("did not end in order"), "{}", stderr(&o));
    assert!(hex_lines(EXPECTED).starts_with(&stdout(&o)), "{}", stdout(&o));

    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 3, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("thread 1: decoded 5, truth 5, mismatches 0"), "{}", stdout(&o));

    // A wrong address inside the prefix still fails.
    std::fs::write(dir.join("thread-1.truth"), truth[..cut].replacen(&truth[..3], "fff", 1)).unwrap();
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));

    // The same directory with end=exit: compare requires the whole flow again.
    std::fs::write(dir.join("meta.txt"), &meta).unwrap();
    std::fs::write(dir.join("thread-1.truth"), &truth[..cut]).unwrap();
    let o = run_dir(&["compare"], &dir);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
}
