//! Writes the committed seed corpus: `cargo run --example gen_seeds -- corpus` (from fuzz/).
//!
//! Each seed is a meaningful scenario in the byte-code the targets read (see the opcode
//! comments in fuzz_targets/*.rs); libFuzzer mutates from there.

use pttrace_core::insn_class::BranchKind;
use pttrace_core::pt::encode::encode;
use pttrace_core::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};
use pttrace_core::pt::rtit_ctl::RtitCtl;
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};
use pttrace_fuzz::SeedWriter;
use std::path::Path;

// ---- msr_sequences opcodes ----
const M_WRMSR: u8 = 0;
const M_CTL: u8 = 1;
const M_CTL_OFF: u8 = 0x11;
const M_BASE: u8 = 2;
const M_PTRS_SINGLE: u8 = 3;
const M_PTRS_TOPA: u8 = 0x13;
const M_RDMSR: u8 = 4;
const M_ENTRY: u8 = 5;
const M_BRANCH: u8 = 7;
const M_BRANCH_TAKEN: u8 = 0x17;
const M_FAR: u8 = 9;
const M_ASYNC: u8 = 10;
const M_MOVCR3: u8 = 11;
const M_TSC: u8 = 13;
const M_CTX: u8 = 14;

// Address selectors (pttrace_fuzz::ADDR_BASES index).
const A_1000: u8 = 1;
const A_2000: u8 = 2;
const A_4000: u8 = 4;
const A_8000: u8 = 5;
const A_HOLE: u8 = 6;
const A_20000: u8 = 7;

// CTL bits.
const OS: u64 = 1 << 2;
const USER: u64 = 1 << 3;
const TOPA: u64 = 1 << 8;
const MTC: u64 = 1 << 9;
const TSC: u64 = 1 << 10;
const CYC: u64 = 1 << 1;

/// Branch-kind byte: kind % 9 with instruction length `len` in the high nibble.
fn kind_byte(kind: u8, len: u8) -> u8 {
    (0..=255u8).find(|k| k % 9 == kind && k >> 4 == len - 1).expect("kind byte")
}

fn entry(w: &mut SeedWriter, op: u8, table: u8, index: u8, base_sel: u8, base_off: u16, size: u8, flags: u8) {
    w.u8(op).u8(table).u16(0).u8(index).u8(base_sel).u16(base_off).u8(size << 4 | flags);
}

fn branches(w: &mut SeedWriter, n: usize) {
    for i in 0..n {
        match i % 6 {
            0 | 1 => {
                let op = if i % 4 == 0 { M_BRANCH_TAKEN } else { M_BRANCH };
                w.u8(op).u8(kind_byte(1, 2)).u8(0).u16((i * 16) as u16);
            }
            2 => {
                w.u8(M_BRANCH).u8(kind_byte(3, 5)).u8(0).u16(0x800 + i as u16);
            }
            3 => {
                w.u8(M_BRANCH).u8(kind_byte(6, 1)).u8(0).u16(0);
            }
            4 => {
                w.u8(M_BRANCH).u8(kind_byte(4, 2)).u8(1).u16(i as u16 * 0x40);
            }
            _ => {
                w.u8(M_TSC).u32(5000);
            }
        }
    }
}

fn msr_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // Linux-style ToPA: two regions and END back to the table, trace OS+User with TSC/MTC/CYC.
    let mut w = SeedWriter::default();
    w.u8(0);
    entry(&mut w, M_ENTRY, A_1000, 0, A_4000, 0, 0, 0);
    entry(&mut w, M_ENTRY, A_1000, 1, A_20000, 0, 0, 2); // INT
    entry(&mut w, M_ENTRY, A_1000, 2, A_1000, 0, 0, 1); // END -> table
    w.u8(M_BASE).u8(A_1000).u16(0);
    w.u8(M_PTRS_TOPA).u8(0).u32(0xF00);
    w.u8(M_CTX).u8(3).u16(0x123);
    w.u8(M_CTL).u64(OS | USER | TOPA | TSC | MTC | CYC).u8(0x13);
    branches(&mut w, 60);
    w.u8(M_FAR).u8(0).u16(0x456).u8(2).u16(0x100);
    w.u8(M_ASYNC).u8(0).u8(2).u16(0x200);
    w.u8(M_MOVCR3).u16(0x789);
    branches(&mut w, 30);
    w.u8(M_RDMSR).u8(3).u8(M_RDMSR).u8(1);
    w.u8(M_CTL_OFF).u64(OS | USER | TOPA).u8(0);
    w.u8(M_RDMSR).u8(0);
    out.push(("topa_two_regions_int", w.bytes));

    // Single range, 4 KiB at 0x20000, started near the end so it wraps.
    let mut w = SeedWriter::default();
    w.u8(0);
    w.u8(M_BASE).u8(A_20000).u16(0);
    w.u8(M_PTRS_SINGLE).u8(5).u32(0xF80);
    w.u8(M_CTL).u64(USER).u8(0);
    w.u8(M_CTX).u8(3).u16(0);
    w.u8(M_CTL_OFF).u64(USER).u8(0);
    w.u8(M_CTX).u8(3).u16(0);
    w.u8(M_CTL).u64(USER).u8(0);
    branches(&mut w, 80);
    w.u8(M_CTL_OFF).u64(USER).u8(0);
    out.push(("single_range_wrap", w.bytes));

    // ToPA STOP region that fills: Stopped, then #GP on WRMSRs while TraceEn = 1, then clear.
    let mut w = SeedWriter::default();
    w.u8(0);
    entry(&mut w, M_ENTRY, A_2000, 0, A_8000, 0, 0, 3); // STOP
    entry(&mut w, M_ENTRY, A_2000, 1, A_2000, 0, 0, 1);
    w.u8(M_BASE).u8(A_2000).u16(0);
    w.u8(M_PTRS_TOPA).u8(0).u32(0xFC0);
    w.u8(M_CTL).u64(OS | TOPA).u8(0);
    branches(&mut w, 40);
    w.u8(M_WRMSR).u8(0).u64(0x3000); // OUTPUT_BASE while TraceEn = 1: #GP
    w.u8(M_WRMSR).u8(2).u64(0x2001); // CTL change while TraceEn = 1: #GP
    w.u8(M_CTL_OFF).u64(OS | TOPA).u8(0);
    w.u8(M_WRMSR).u8(3).u64(0); // STATUS <- 0
    w.u8(M_CTL).u64(OS | TOPA).u8(0);
    out.push(("topa_stop_then_gp", w.bytes));

    // TraceStop range and filter range via ADDR0/ADDR1.
    let mut w = SeedWriter::default();
    w.u8(0);
    w.u8(M_WRMSR).u8(5).u64(0x40_1000); // ADDR0_A
    w.u8(M_WRMSR).u8(6).u64(0x40_2000); // ADDR0_B
    w.u8(M_WRMSR).u8(7).u64(0x40_1800); // ADDR1_A
    w.u8(M_WRMSR).u8(8).u64(0x40_1810); // ADDR1_B
    w.u8(M_BASE).u8(A_20000).u16(0);
    w.u8(M_PTRS_SINGLE).u8(6).u32(0);
    w.u8(M_CTL).u64(OS | (1 << 32) | (2 << 36)).u8(0);
    branches(&mut w, 40);
    w.u8(M_RDMSR).u8(3);
    w.u8(M_CTL_OFF).u64(OS).u8(0);
    out.push(("filter_and_tracestop", w.bytes));

    // Minimal profile: single-entry ToPA whose END must point back at the table; a bad one.
    let mut w = SeedWriter::default();
    w.u8(1);
    entry(&mut w, M_ENTRY, A_1000, 0, A_4000, 0, 0, 2);
    entry(&mut w, M_ENTRY, A_1000, 1, A_1000, 0, 0, 1);
    w.u8(M_BASE).u8(A_1000).u16(0);
    w.u8(M_CTL).u64(OS | TOPA).u8(0);
    branches(&mut w, 30);
    w.u8(M_CTL_OFF).u64(OS | TOPA).u8(0);
    entry(&mut w, M_ENTRY, A_1000, 1, A_2000, 0, 0, 1);
    w.u8(M_PTRS_TOPA).u8(0).u32(0xFF0);
    w.u8(M_CTL).u64(OS | TOPA).u8(0);
    branches(&mut w, 10);
    out.push(("minimal_single_entry_topa", w.bytes));
    out
}

// ---- topa_tables opcodes ----
const T_ENTRY: u8 = 0;
const T_RAW: u8 = 2;
const T_START_TOPA: u8 = 0x13;
const T_START_SINGLE: u8 = 0x03;
const T_STOP: u8 = 4;
const T_WRITE: u8 = 6;

fn topa_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // Three regions (one in a hole, one INT), END to a second table whose region STOPs.
    let mut w = SeedWriter::default();
    w.u8(0);
    entry(&mut w, T_ENTRY, A_1000, 0, A_4000, 0, 0, 0);
    entry(&mut w, T_ENTRY, A_1000, 1, A_20000, 0, 1, 2);
    entry(&mut w, T_ENTRY, A_1000, 2, A_HOLE, 0, 0, 0);
    entry(&mut w, T_ENTRY, A_1000, 3, A_2000, 0, 0, 1);
    entry(&mut w, T_ENTRY, A_2000, 0, A_8000, 0, 0, 3);
    w.u8(T_START_TOPA).u8(A_1000).u16(0).u64(0x7F);
    for _ in 0..8 {
        w.u8(T_WRITE).u16(0xFFF);
    }
    out.push(("chain_int_hole_stop", w.bytes));

    // END chains that loop between two tables.
    let mut w = SeedWriter::default();
    w.u8(0);
    entry(&mut w, T_ENTRY, A_1000, 0, A_4000, 0, 0, 0);
    entry(&mut w, T_ENTRY, A_1000, 1, A_2000, 0, 0, 1);
    entry(&mut w, T_ENTRY, A_2000, 0, A_8000, 0, 0, 0);
    entry(&mut w, T_ENTRY, A_2000, 1, A_1000, 0, 0, 1);
    w.u8(T_START_TOPA).u8(A_1000).u16(0).u64(0x7F | (0x800 << 32));
    w.u8(0x16).u16(0xC000);
    w.u8(T_STOP);
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F | (1 << 7));
    w.u8(T_WRITE).u16(0x100);
    out.push(("looping_end_chain", w.bytes));

    // A table inside its own output region: packet bytes overwrite the entries.
    let mut w = SeedWriter::default();
    w.u8(0);
    entry(&mut w, T_ENTRY, A_4000, 0, A_4000, 0, 0, 0);
    entry(&mut w, T_ENTRY, A_4000, 1, A_4000, 0, 0, 1);
    w.u8(T_START_TOPA).u8(A_4000).u16(0).u64(0x7F | (0x10 << 32));
    for _ in 0..3 {
        w.u8(T_WRITE).u16(0xFFF);
    }
    out.push(("table_inside_region", w.bytes));

    // Single-entry ToPA (profile 2) with INT, and errors: END in entry 0, reserved bit,
    // misaligned region, offset beyond the region.
    let mut w = SeedWriter::default();
    w.u8(2);
    entry(&mut w, T_ENTRY, A_1000, 0, A_8000, 0, 0, 2);
    entry(&mut w, T_ENTRY, A_1000, 1, A_1000, 0, 0, 1);
    w.u8(T_START_TOPA).u8(A_1000).u16(0).u64(0x7F);
    w.u8(T_WRITE).u16(0xF00).u8(T_WRITE).u16(0x200);
    w.u8(T_STOP);
    entry(&mut w, T_ENTRY, A_2000, 0, A_4000, 0, 0, 1);
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F);
    entry(&mut w, T_ENTRY, A_2000, 0, A_4000, 0, 0, 6);
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F);
    entry(&mut w, T_ENTRY, A_2000, 0, A_4000 | 0x30, 1, 1, 0); // 8 KiB region at 0x5000
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F);
    entry(&mut w, T_ENTRY, A_2000, 0, A_4000, 0, 0, 0);
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F | (0x1000 << 32));
    w.u8(T_RAW).u8(A_2000).u16(0).u64(0xFEE0_0000);
    w.u8(T_START_TOPA).u8(A_2000).u16(0).u64(0x7F);
    out.push(("single_entry_and_errors", w.bytes));

    // Single range: 8 KiB at 0x20000 from offset 0x1F00, several wraps; then bad masks.
    let mut w = SeedWriter::default();
    w.u8(0);
    w.u8(T_START_SINGLE).u8(A_20000).u16(0).u64(0x1FFF | (0x1F00 << 32));
    w.u8(T_WRITE).u16(0x3000).u8(T_WRITE).u16(0x123);
    w.u8(T_STOP);
    w.u8(T_START_SINGLE).u8(A_20000).u16(0).u64(0x2FFF);
    w.u8(T_START_SINGLE).u8(A_20000 | 0x30).u16(1).u64(0x1FFF);
    w.u8(T_START_SINGLE).u8(A_HOLE).u16(0).u64(0xFFFF);
    w.u8(T_WRITE).u16(0x800);
    out.push(("single_range_wraps_and_errors", w.bytes));
    out
}

fn packet_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();

    // A real tracer stream: PSB+, TNT, TIPs, compressed RETs, FUP/TIP for an interrupt,
    // far transfers with MODE/PIP, timing packets.
    let mut ctl = RtitCtl::default();
    ctl.set_os(true).set_user(true).set_branch_en(true).set_tsc_en(true).set_mtc_en(true).set_cyc_en(true);
    let mut t = Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, Context::USER64);
    t.set_tsc(1_000_000);
    t.enable(0x40_1000);
    let mut tsc = 1_000_000;
    for i in 0..40u64 {
        tsc += 700;
        t.set_tsc(tsc);
        let ip = 0x40_1000 + i * 0x20;
        t.branch(ip, ip + 2, BranchKind::Conditional { target: ip + 0x10 }, if i % 3 == 0 { ip + 0x10 } else { ip + 2 });
        if i % 7 == 0 {
            t.branch(ip + 2, ip + 7, BranchKind::DirectCall { target: 0x40_8000 }, 0x40_8000);
            t.branch(0x40_8000, 0x40_8001, BranchKind::Return, ip + 7);
        }
        if i % 11 == 0 {
            t.branch(ip + 4, ip + 6, BranchKind::IndirectJump, 0x7fff_f7a0_1234 + i);
        }
    }
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x40_2000 }, 0xffff_ffff_8100_0000, Context::KERNEL64);
    t.far_transfer(
        pttrace_core::insn_class::FarKind::Iret,
        0x40_2000,
        Context { cpl: 3, cr3: 0x5000, mode: ExecMode::Bit32 },
    );
    t.finish();
    out.push(("tracer_stream", t.take_output()));

    // One of every packet kind and IP compression, then the unsupported ones libipt knows.
    let mut b = Vec::new();
    let ip = |c, payload| IpPayload { compression: c, payload };
    for p in [
        Packet::Psb,
        Packet::Tsc { tsc: 0x12_3456_789a },
        Packet::Tma { ctc: 0x1234, fast_counter: 0x1ff },
        Packet::Cbr { ratio: 0x24 },
        Packet::Pip { cr3: 0x1234_5000, nr: true },
        Packet::ModeExec { mode: ExecMode::Bit64, if_flag: true },
        Packet::Fup(ip(IpCompression::Sext48, 0xffff_8000_1234)),
        Packet::PsbEnd,
        Packet::TipPge(ip(IpCompression::Update16, 0x1000)),
        Packet::Tnt { bits: 0b101, count: 3 },
        Packet::TntLong { bits: 0x5555_5555, count: 40 },
        Packet::Tip(ip(IpCompression::Update32, 0x4567_8000)),
        Packet::Tip(ip(IpCompression::Update48, 0x7fff_0000_1000)),
        Packet::Tip(ip(IpCompression::Full, 0xffff_ffff_8100_0000)),
        Packet::ModeTsx { in_tx: true, tx_abort: false },
        Packet::Mtc { ctc: 0x42 },
        Packet::Cyc { value: 0x1_2345 },
        Packet::Ovf,
        Packet::Fup(ip(IpCompression::Full, 0x40_1000)),
        Packet::TipPgd(IpPayload::SUPPRESSED),
        Packet::TraceStop,
        Packet::Pad,
    ] {
        encode(&p, &mut b);
    }
    // VMCS, PTW (4-byte payload, IP), MNT, EXSTOP, MWAIT, PWRE, PWRX, CFE, EVD, TRIG.
    b.extend_from_slice(&[0x02, 0xc8, 0x10, 0x20, 0x30, 0x40, 0x50]);
    b.extend_from_slice(&[0x02, 0x92, 1, 2, 3, 4]);
    b.extend_from_slice(&[0x02, 0xc3, 0x88, 1, 2, 3, 4, 5, 6, 7, 8]);
    b.extend_from_slice(&[0x02, 0x62, 0x02, 0xe2]);
    b.extend_from_slice(&[0x02, 0xc2, 1, 0, 0, 0, 2, 0, 0, 0]);
    b.extend_from_slice(&[0x02, 0x22, 0x12, 0x34]);
    b.extend_from_slice(&[0x02, 0xa2, 1, 2, 3, 4, 5]);
    b.extend_from_slice(&[0x02, 0x13, 0x01, 0x20]);
    b.extend_from_slice(&[0x02, 0x53, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]);
    b.extend_from_slice(&[0xd9, 0x41, 1, 2, 3]);
    out.push(("every_packet_kind", b));

    // Non-canonical encodings and errors: MODE reserved bits, CBR/TMA reserved bytes, a
    // non-minimal CYC, a broken PSB, reserved IPBytes, then a PSB to resync and a truncated TIP.
    let mut b = vec![0x99, 0x19, 0x99, 0x3d, 0x02, 0x03, 0x20, 0xff, 0x02, 0x73, 1, 2, 0xff, 3, 0xff];
    b.extend_from_slice(&[0x07, 0x01, 0x00]);
    b.extend_from_slice(&[0x02, 0x82, 0x02, 0x82, 0x02, 0x83]);
    encode(&Packet::Psb, &mut b);
    b.extend_from_slice(&[0xad, 0x01]);
    encode(&Packet::Psb, &mut b);
    b.extend_from_slice(&[0xcd, 1, 2, 3]);
    out.push(("noncanonical_and_errors", b));
    out
}

fn main() {
    let root = std::env::args().nth(1).unwrap_or_else(|| "corpus".to_string());
    for (target, seeds) in [("msr_sequences", msr_seeds()), ("topa_tables", topa_seeds()), ("packet_decode", packet_seeds())] {
        let dir = Path::new(&root).join(target);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        for (name, bytes) in seeds {
            let path = dir.join(format!("seed-{name}"));
            std::fs::write(&path, &bytes).expect("write seed");
            println!("{} ({} bytes)", path.display(), bytes.len());
        }
    }
}
