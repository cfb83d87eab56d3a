//! Internal-buffer overflow of the PT model in the deterministic drain mode: exact packet
//! streams, one test per scenario, named after libipt's test/src/*.ptt scenario where one
//! exists (ovf-fup, ovf-tip_pge, ovf, psb-ovf-fup, psb-ovf-tip_pge, ovf-timing-fup).
//!
//! Every stream is also
//! - decoded by the project's packet decoder (core/src/pt/decode.rs) back to the packet log,
//! - walked with last-IP reconstruction twice, by a decoder that resets last-IP at OVF
//!   (libipt) and by one that does not: both must see the same IPs,
//! - checked against the context rules of libipt's event decoder (src/pt_event_decoder.c):
//!   TNT and TIP only while tracing is enabled, and after OVF only timing packets before the FUP
//!   it binds to (pt_evt_find_ovf_fup).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pttrace_core::insn_class::{BranchKind, FarKind};
use pttrace_core::pt::decode::PacketDecoder;
use pttrace_core::pt::internal_buffer::{Bandwidth, BufferConfig, BufferStats, DrainClock, RealTimeDrainer};
use pttrace_core::pt::last_ip::LastIp;
use pttrace_core::pt::packet::{ExecMode, IpCompression as C, IpPayload, Packet};
use pttrace_core::pt::rtit_ctl::RtitCtl;
use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};

use Packet::*;

fn ip(c: C, payload: u64) -> IpPayload {
    IpPayload { compression: c, payload }
}

const NOIP: IpPayload = IpPayload::SUPPRESSED;
const M64: Packet = ModeExec { mode: ExecMode::Bit64, if_flag: false };
const KERNEL_ENTRY: u64 = 0xffff_ffff_8100_0000;

/// User-only branch tracing as `perf record -e intel_pt//u` configures it, without timing.
fn user_cfg() -> TraceConfig {
    let mut ctl = RtitCtl::default();
    ctl.set_user(true).set_branch_en(true);
    TraceConfig { ctl, ..TraceConfig::default() }
}

fn buffer(capacity: usize, resume_free: usize, bytes: u64, per_units: u64) -> BufferConfig {
    BufferConfig::new(capacity, Bandwidth::new(bytes, per_units).unwrap())
        .unwrap()
        .with_resume_free(resume_free)
        .unwrap()
}

/// A tracer with an internal buffer, and the guest memory its output reached.
struct Run {
    t: Tracer,
    mem: Vec<u8>,
    /// Next target of `fill`'s indirect jumps.
    target: u64,
}

impl Run {
    /// Deterministic drain at 1 byte per unit.
    fn new(cfg: TraceConfig, ctx: Context, capacity: usize, resume_free: usize) -> Run {
        Run::with(Tracer::new(cfg, ctx).with_packet_log().with_internal_buffer(buffer(capacity, resume_free, 1, 1)))
    }

    fn with(t: Tracer) -> Run {
        Run { t, mem: Vec::new(), target: 0x402000 }
    }

    fn pending(&self) -> usize {
        self.t.internal_buffer().unwrap().pending()
    }

    fn stats(&self) -> BufferStats {
        self.t.buffer_stats().unwrap()
    }

    /// Packets accepted so far (the packet log's length).
    fn mark(&self) -> usize {
        self.t.stats().packets as usize
    }

    /// `units` of guest progress, then store what the drain engine released.
    fn run(&mut self, units: u64) {
        self.t.credit(units);
        self.store();
    }

    /// What the plugin does after each block: hand the released bytes to memory.
    fn store(&mut self) {
        let bytes = self.t.take_output();
        self.mem.extend_from_slice(&bytes);
    }

    /// Produce exactly `bytes` bytes of packets in user code: `bytes % 3` TNT bytes (six taken
    /// conditional branches each), then indirect jumps whose TIPs take 3 bytes (update-16).
    fn fill(&mut self, bytes: usize) {
        for _ in 0..bytes % 3 {
            for _ in 0..6 {
                self.t.branch(0x401f10, 0x401f12, BranchKind::Conditional { target: 0x401f00 }, 0x401f00);
            }
        }
        for _ in 0..bytes / 3 {
            self.jump();
        }
    }

    /// One indirect jump to the next fill target; returns the target.
    fn jump(&mut self) -> u64 {
        let to = self.target;
        self.target += 0x10;
        self.t.branch(to - 0x8, to - 0x6, BranchKind::IndirectJump, to);
        to
    }

    /// End the trace, store everything, and check the stream (module documentation).
    fn finish(mut self) -> (Vec<Packet>, Vec<u8>, BufferStats) {
        self.t.finish();
        self.store();
        let log = self.t.take_packet_log();
        check_stream(&self.mem, &log);
        let stats = self.stats();
        assert!(stats.is_balanced(), "{stats:?}");
        assert_eq!(stats.drained_bytes, self.mem.len() as u64, "every accepted byte reached memory");
        assert_eq!(stats.buffered_bytes, 0);
        assert_eq!(stats.overflows, stats.ovf_packets, "every overflow reported by an OVF");
        assert_eq!(log.iter().filter(|p| **p == Ovf).count() as u64, stats.ovf_packets);
        (log, self.mem, stats)
    }
}

fn check_stream(bytes: &[u8], log: &[Packet]) {
    let decoded: Vec<Packet> = PacketDecoder::new(bytes).map(|d| d.expect("decodes").packet).collect();
    assert_eq!(decoded, log, "bytes and packet log disagree");
    assert_eq!(ips(&decoded, true), ips(&decoded, false), "last-IP reset at OVF changes the decoded IPs");
    check_libipt_context(&decoded);
}

/// The IP each IP packet denotes for a decoder that resets last-IP at PSB, and at OVF too
/// when `reset_at_ovf`.
fn ips(p: &[Packet], reset_at_ovf: bool) -> Vec<Option<u64>> {
    let mut last = LastIp::new();
    p.iter()
        .map(|x| match *x {
            Psb => {
                last.reset();
                None
            }
            Ovf => {
                if reset_at_ovf {
                    last.reset();
                }
                None
            }
            Tip(pl) | TipPge(pl) | TipPgd(pl) | Fup(pl) => last.decompress(pl),
            _ => None,
        })
        .collect()
}

/// libipt's event decoder (src/pt_event_decoder.c) accepts the stream: TNT and TIP only while
/// it considers tracing enabled (after TIP.PGE, a PSB+ with FUP, or an OVF bound to a FUP);
/// after OVF, pt_evt_find_ovf_fup skips timing packets to the FUP, ends at any other
/// non-timing packet (standalone overflow, tracing disabled), and rejects PSBEND, TIP,
/// TIP.PGD and TNT.
fn check_libipt_context(p: &[Packet]) {
    let mut enabled = false;
    let mut in_psb = false;
    let mut psb_fup = false;
    let mut i = 0;
    while i < p.len() {
        match p[i] {
            Psb => {
                in_psb = true;
                psb_fup = false;
            }
            PsbEnd => {
                assert!(in_psb, "PSBEND at {i} outside PSB+");
                in_psb = false;
                enabled = psb_fup;
            }
            Fup(_) if in_psb => psb_fup = true,
            Ovf => {
                // "An OVF ends a PSB just like PSBEND."
                in_psb = false;
                enabled = false;
                let mut j = i + 1;
                while j < p.len() {
                    match p[j] {
                        Fup(_) => {
                            enabled = true;
                            i = j;
                            break;
                        }
                        Pad | Cbr { .. } | Tsc { .. } | Tma { .. } | Mtc { .. } | Cyc { .. } => j += 1,
                        PsbEnd | Tip(_) | TipPgd(_) | Tnt { .. } | TntLong { .. } => {
                            panic!("OVF at {i} followed by {:?} at {j}: bad context for libipt", p[j])
                        }
                        _ => break,
                    }
                }
            }
            TipPge(_) => enabled = true,
            TipPgd(_) | TraceStop => enabled = false,
            Tnt { .. } | TntLong { .. } | Tip(_) => {
                assert!(enabled, "{:?} at {i} while libipt considers tracing disabled", p[i])
            }
            _ => {}
        }
        i += 1;
    }
}

/// The bytes of `p` as the encoder writes them.
fn bytes_of(p: &[Packet]) -> Vec<u8> {
    let mut v = Vec::new();
    for x in p {
        pttrace_core::pt::encode::encode(x, &mut v);
    }
    v
}

/// Enable in user code at 0x401000 and fill the 64-byte buffer to 62 bytes:
/// PSB, CBR, PSBEND (22), MODE.Exec (2), TIP.PGE update-32 (5), 11 TIPs (33).
fn user_run_at_62_of_64() -> Run {
    let mut r = Run::new(user_cfg(), Context::USER64, 64, 32);
    r.t.enable(0x401000);
    assert_eq!(r.pending(), 29);
    r.fill(33);
    assert_eq!(r.pending(), 62);
    r
}

#[test]
fn ovf_fup_when_the_overflow_resolves_with_packet_en_1() {
    let mut r = user_run_at_62_of_64();
    let mark = r.mark();
    // 3 bytes do not fit in 2: the TIP is dropped whole and the overflow begins.
    r.jump();
    // During the overflow even a packet that would fit (a 1-byte TNT) is dropped.
    r.fill(1);
    let resume = r.jump();
    assert_eq!(r.stats().dropped_packets, 3);
    assert!(r.t.output().is_empty(), "nothing drained yet");
    // The drain engine empties the buffer; the next event finds room.
    r.run(62);
    assert_eq!(r.mem.len(), 62);
    r.t.branch(resume, resume + 2, BranchKind::IndirectJump, 0x402400);
    let (log, mem, stats) = r.finish();
    // ovf-fup.ptt: ovf(), fup(3: %l1) -- the FUP is the next instruction after the overflow.
    let tail = [Ovf, Fup(ip(C::Sext48, resume)), Tip(ip(C::Update16, 0x2400))];
    assert_eq!(&log[mark..], &tail);
    assert_eq!(&mem[62..], &bytes_of(&tail)[..]);
    // 02 F3, then FUP with IPBytes 011b: (3 << 5) | 1DH, six payload bytes.
    assert_eq!(resume, 0x4020c0);
    assert_eq!(&mem[62..71], &[0x02, 0xF3, 0x7D, 0xC0, 0x20, 0x40, 0, 0, 0]);
    assert_eq!((stats.overflows, stats.ovf_packets, stats.dropped_packets, stats.dropped_bytes), (1, 1, 3, 7));
}

#[test]
fn ovf_tip_pge_when_the_overflow_resolves_with_packet_en_0() {
    // Resolve at a kernel event (PacketEn = 0 there), or at the SYSRET itself.
    for resolve_in_kernel in [true, false] {
        let mut r = user_run_at_62_of_64();
        let mark = r.mark();
        r.jump(); // dropped: overflow
        // SYSCALL leaves user code: its TIP.PGD is lost in the overflow too.
        r.t.far_transfer(FarKind::Syscall, KERNEL_ENTRY, Context::KERNEL64);
        r.run(62);
        if resolve_in_kernel {
            r.t.branch(KERNEL_ENTRY + 0x10, KERNEL_ENTRY + 0x12, BranchKind::IndirectJump, KERNEL_ENTRY + 0x100);
            assert_eq!(r.mark(), mark + 1, "PacketEn = 0: only the OVF");
            r.t.branch(KERNEL_ENTRY + 0x100, KERNEL_ENTRY + 0x102, BranchKind::IndirectJump, KERNEL_ENTRY + 0x200);
            assert_eq!(r.mark(), mark + 1, "and nothing after it while PacketEn = 0");
        }
        r.t.far_transfer(FarKind::Sysret, 0x402300, Context::USER64);
        let (log, mem, _) = r.finish();
        // ovf-tip_pge.ptt: ovf(), mode.exec(64bit), tip.pge(3: %l1). The TIP.PGE IP is sent in
        // full though 0x402300 shares its upper bits with the last IP before the overflow.
        assert_eq!(&log[mark..], &[Ovf, M64, TipPge(ip(C::Sext48, 0x402300))]);
        assert_eq!(&mem[62..], &[0x02, 0xF3, 0x99, 0x01, 0x71, 0x00, 0x23, 0x40, 0, 0, 0]);
    }
}

#[test]
fn ovf_across_a_tnt_in_progress_loses_the_bits_of_the_gap() {
    let mut r = Run::new(user_cfg(), Context::USER64, 64, 32);
    r.t.enable(0x401000);
    r.fill(34); // 63 of 64
    let mark = r.mark();
    // A loop: the Jcc at 401F10H goes back to 401F00H when taken.
    let jcc = |t: &mut Tracer, taken: bool| {
        let next = if taken { 0x401f00 } else { 0x401f12 };
        t.branch(0x401f10, 0x401f12, BranchKind::Conditional { target: 0x401f00 }, next)
    };
    // Three results pending in the TNT accumulator: taken, not taken, taken.
    for taken in [true, false, true] {
        jcc(&mut r.t, taken);
    }
    // The indirect jump flushes them (1 byte, fits exactly), then its TIP does not fit.
    r.t.branch(0x401f20, 0x401f22, BranchKind::IndirectJump, 0x403000);
    assert_eq!(r.pending(), 64);
    // Eight results during the overflow: a full TNT dropped, two bits still accumulated; the
    // last one is not taken, so execution continues at 401F12H.
    for i in 0..8 {
        jcc(&mut r.t, i % 2 == 0);
    }
    r.run(64);
    // At the next event the overflow resolves: the two stale bits are not sent.
    r.t.branch(0x401f20, 0x401f22, BranchKind::IndirectJump, 0x403100);
    for taken in [false, true] {
        jcc(&mut r.t, taken);
    }
    let (log, _, stats) = r.finish();
    assert_eq!(
        &log[mark..],
        &[
            Tnt { bits: 0b101, count: 3 },
            Ovf,
            Fup(ip(C::Sext48, 0x401f12)),
            Tip(ip(C::Update16, 0x3100)),
            Tnt { bits: 0b01, count: 2 },
        ]
    );
    assert_eq!(stats.dropped_packets, 2, "the TIP and the full TNT of the gap");
}

#[test]
fn psb_ovf_fup_overflow_during_psb_plus_cuts_it_short() {
    let mut r = Run::new(user_cfg(), Context::USER64, 64, 32);
    // PacketByteCnt restored close to the 2 KiB period so that the PSB+ lands where we want it.
    r.t.set_packet_byte_count(2048 - 36);
    r.t.enable(0x401000); // MODE.Exec, TIP.PGE: 7 bytes, no PSB
    assert_eq!(r.pending(), 7);
    r.fill(29); // the last TIP reaches PacketByteCnt = 2048 at 36 bytes: PSB+ follows it
    let last_target = r.target - 0x10;
    // PSB 16 (52), CBR 4 (56), MODE.Exec 2 (58), FUP update-32 5 (63): PSBEND does not fit.
    assert_eq!(r.pending(), 63);
    assert_eq!(r.stats().overflows, 1);
    r.run(63);
    r.t.branch(last_target, last_target + 2, BranchKind::IndirectJump, 0x402800);
    let byte_count = r.t.packet_byte_count();
    let (log, _, stats) = r.finish();
    let at = log.iter().position(|p| *p == Psb).unwrap();
    // psb-ovf-fup.ptt: psb(), mode.exec(64bit), fup(3: %l0), ovf(), fup(3: %l1).
    assert_eq!(
        &log[at..],
        &[
            Psb,
            Cbr { ratio: 24 },
            M64,
            Fup(ip(C::Update32, last_target)),
            Ovf,
            Fup(ip(C::Sext48, last_target)),
            Tip(ip(C::Update16, 0x2800)),
        ]
    );
    assert_eq!(stats.dropped_packets, 1, "only the PSBEND");
    // The PSB was written, so the PSB period restarted there: OVF 2 + FUP 7 + TIP 3.
    assert_eq!(byte_count, 12);
}

#[test]
fn psb_ovf_tip_pge_overflow_during_psb_plus_resolving_with_packet_en_0() {
    let mut r = Run::new(user_cfg(), Context::USER64, 64, 32);
    r.t.set_packet_byte_count(2048 - 36);
    r.t.enable(0x401000);
    r.fill(29);
    let last_target = r.target - 0x10;
    r.t.far_transfer(FarKind::Syscall, KERNEL_ENTRY, Context::KERNEL64);
    r.run(64);
    r.t.far_transfer(FarKind::Sysret, 0x402900, Context::USER64);
    let (log, _, _) = r.finish();
    let at = log.iter().position(|p| *p == Psb).unwrap();
    // psb-ovf-tip_pge.ptt: psb(), mode.exec, fup(3: %l0), ovf(), mode.exec(64bit), tip.pge(3: %l1).
    assert_eq!(
        &log[at..],
        &[Psb, Cbr { ratio: 24 }, M64, Fup(ip(C::Update32, last_target)), Ovf, M64, TipPge(ip(C::Sext48, 0x402900))]
    );
}

#[test]
fn psb_dropped_by_an_overflow_follows_once_the_overflow_resolved() {
    let mut r = Run::new(user_cfg(), Context::USER64, 64, 32);
    r.t.set_packet_byte_count(2048 - 52);
    r.t.enable(0x401000);
    r.fill(45); // 52 bytes when PacketByteCnt reaches 2048: the 16-byte PSB does not fit in 12
    let last_target = r.target - 0x10;
    assert_eq!(r.pending(), 52);
    assert_eq!(r.t.stats().psbs, 0);
    r.run(52);
    r.t.branch(last_target, last_target + 2, BranchKind::IndirectJump, 0x402800);
    let (log, _, stats) = r.finish();
    let at = log.iter().position(|p| *p == Ovf).unwrap();
    assert_eq!(
        &log[at..],
        &[
            Ovf,
            Fup(ip(C::Sext48, last_target)),
            Tip(ip(C::Update16, 0x2800)),
            Psb,
            Cbr { ratio: 24 },
            M64,
            Fup(ip(C::Update32, 0x402800)),
            PsbEnd,
        ]
    );
    assert_eq!(stats.dropped_packets, 5, "PSB, CBR, MODE.Exec, FUP, PSBEND");
}

#[test]
fn last_ip_reset_after_ovf_next_ip_packet_carries_the_full_ip() {
    // Kernel tracing: IPs share bits 63:16, so without the OVF rule the FUP would be update-16.
    let mut cfg = user_cfg();
    cfg.ctl.set_user(false).set_os(true);
    let mut r = Run::new(cfg, Context::KERNEL64, 64, 32);
    r.t.enable(KERNEL_ENTRY);
    // PSB, PIP, CBR, PSBEND (30), MODE.Exec (2), TIP.PGE sext-48 (7).
    assert_eq!(r.pending(), 39);
    let k = |n: u64| KERNEL_ENTRY + n * 0x10;
    for n in 1..=9 {
        r.t.branch(k(n) - 8, k(n) - 6, BranchKind::IndirectJump, k(n)); // 3 bytes each: 66 > 64 at n = 9
    }
    assert_eq!(r.stats().dropped_packets, 1);
    r.run(64);
    let mark = r.mark();
    r.t.branch(k(9) + 2, k(9) + 4, BranchKind::IndirectJump, k(10));
    r.t.branch(k(10) + 2, k(10) + 4, BranchKind::IndirectJump, k(11));
    let (log, _, _) = r.finish();
    assert_eq!(
        &log[mark..],
        &[
            Ovf,
            Fup(ip(C::Sext48, k(9) & 0xffff_ffff_ffff)),
            // Compression resumes against the FUP's IP.
            Tip(ip(C::Update16, k(10) & 0xffff)),
            Tip(ip(C::Update16, k(11) & 0xffff)),
        ]
    );
    let d = ips(&log, true);
    assert_eq!(d[mark + 1], Some(k(9)));
    assert_eq!(d[mark + 2], Some(k(10)));
}

#[test]
fn ret_stack_reset_at_ovf_a_ret_to_an_earlier_call_is_not_compressed() {
    let run = |capacity: usize| {
        let mut r = Run::new(user_cfg(), Context::USER64, capacity, 32);
        r.t.enable(0x401000);
        // CALL before the overflow: NLIP 0x401005 on the compression stack.
        r.t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x402000 }, 0x402000);
        r.fill(33);
        r.jump(); // overflows a 64-byte buffer
        r.run(64);
        let mark = r.mark();
        r.t.branch(0x4020c0, 0x4020c2, BranchKind::IndirectJump, 0x403100);
        r.t.branch(0x403100, 0x403101, BranchKind::Return, 0x401005);
        // CALL/RET after the OVF compress as usual.
        r.t.branch(0x401005, 0x40100a, BranchKind::DirectCall { target: 0x404000 }, 0x404000);
        r.t.branch(0x404000, 0x404001, BranchKind::Return, 0x40100a);
        let (log, _, _) = r.finish();
        log[mark..].to_vec()
    };
    let resume = 0x402000 + 11 * 0x10; // the dropped jump's target
    assert_eq!(
        run(64),
        [
            Ovf,
            Fup(ip(C::Sext48, resume)),
            Tip(ip(C::Update16, 0x3100)),
            Tip(ip(C::Update16, 0x1005)),
            Tnt { bits: 1, count: 1 },
        ]
    );
    // Without the overflow the same RET is a compressed TNT bit.
    assert_eq!(
        run(4096),
        [Tip(ip(C::Update16, 0x3100)), Tnt { bits: 0b11, count: 2 }]
    );
}

#[test]
fn ovf_timing_fup_tsc_and_tma_resynchronise_time_before_the_fup() {
    let mut cfg = user_cfg();
    cfg.ctl.set_tsc_en(true).set_mtc_en(true);
    let mut r = Run::new(cfg, Context::USER64, 64, 32);
    r.t.set_tsc(0x1000);
    r.t.enable(0x401000);
    // PSB, TSC, TMA, CBR, PSBEND (37), MODE.Exec (2), TIP.PGE (5).
    assert_eq!(r.pending(), 44);
    r.fill(18);
    let resume = r.jump(); // dropped
    r.run(64);
    let tsc = 0x12345;
    r.t.set_tsc(tsc);
    let mark = r.mark();
    r.t.branch(resume, resume + 2, BranchKind::IndirectJump, 0x402800);
    let (log, _, _) = r.finish();
    // ovf-timing-fup.ptt: ovf(), tsc, (cbr), tma, ..., fup(3: %l1). No MTC follows: the TMA
    // already carries the current CTC.
    assert_eq!(
        &log[mark..],
        &[
            Ovf,
            Tsc { tsc },
            Tma { ctc: (tsc / 128) as u16, fast_counter: (tsc % 128) as u16 },
            Fup(ip(C::Sext48, resume)),
            Tip(ip(C::Update16, 0x2800)),
        ]
    );
}

#[test]
fn ovf_trace_en_clear_drains_everything_and_ends_with_a_lone_ovf() {
    let mut r = user_run_at_62_of_64();
    r.jump(); // overflow
    let mark = r.mark();
    // No drain credit at all: clearing TraceEn drains the buffer by itself. The FUP and
    // TIP.PGD of the WRMSR are lost in the overflow; OVF is not followed by a TIP.PGD
    // (ovf.ptt ends with ovf(); APL11 is the erratum where it is).
    r.t.disable(0x402500);
    assert_eq!(r.t.output().len(), 64);
    assert_eq!(r.pending(), 0);
    r.store();
    let (log, mem, stats) = r.finish();
    assert_eq!(&log[mark..], &[Ovf]);
    assert_eq!(&mem[62..], &[0x02, 0xF3]);
    assert_eq!(stats.dropped_packets, 3, "TIP, FUP, TIP.PGD");
}

#[test]
fn trace_en_clear_without_overflow_drains_the_whole_buffer() {
    let mut r = Run::new(user_cfg(), Context::USER64, 256, 128);
    r.t.enable(0x401000);
    r.fill(9);
    assert!(r.t.output().is_empty(), "no credit, nothing released");
    r.t.disable(0x402500);
    let released = r.t.output().len();
    r.store();
    assert_eq!(released, 29 + 9 + 3 + 1, "+ FUP update-16, TIP.PGD");
    // Tracing again: the buffer is empty, PSB+ fits.
    r.t.enable(0x401000);
    let (log, _, stats) = r.finish();
    assert_eq!(stats.overflows, 0);
    assert_eq!(&log[log.len() - 5..], &[Psb, Cbr { ratio: 24 }, PsbEnd, M64, TipPge(ip(C::Update32, 0x401000))]);
    assert!(log.contains(&Fup(ip(C::Update16, 0x2500))) && log.contains(&TipPgd(NOIP)));
}

#[test]
fn output_stop_discards_the_internal_buffer_and_counts_it() {
    let mut r = user_run_at_62_of_64();
    r.run(20); // 20 bytes reached memory, 42 pending
    for _ in 0..7 {
        r.jump();
    }
    assert_eq!(r.pending(), 63);
    r.jump(); // overflow
    // The output unit stopped (ToPA STOP): the internal buffer's content is lost.
    r.t.stop_without_packets();
    let s = r.stats();
    assert_eq!((s.discarded_bytes, s.buffered_bytes, s.overflows, s.ovf_packets), (63, 0, 1, 0));
    assert!(s.is_balanced());
    assert_eq!(s.drained_bytes, 20);
    // Software clears TraceEn, then enables again: a fresh PSB+ fits.
    r.t.disable(0x402500);
    r.t.enable(0x401000);
    r.t.finish();
    r.store();
    let s = r.stats();
    assert!(s.is_balanced());
    assert_eq!(&r.mem[20..36], &[0x02, 0x82].repeat(8)[..], "PSB after the stop");
    assert_eq!(s.accepted_bytes, s.drained_bytes + s.discarded_bytes);
}

/// A mixed user-mode workload from a fixed seed: loops, indirect jumps, calls and returns,
/// system calls; `drain(units)` after each event.
fn workload(t: &mut Tracer, events: usize, mut drain: impl FnMut(&mut Tracer, u64)) {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    t.enable(0x401000);
    let mut calls: Vec<u64> = Vec::new();
    let mut pc = 0x401000u64;
    for _ in 0..events {
        let r = next();
        let to = 0x400000 + (r >> 8) % 0x40000 * 4;
        match r % 8 {
            0..=2 => t.branch(pc, pc + 2, BranchKind::Conditional { target: to }, if r & 0x100 != 0 { to } else { pc + 2 }),
            3 => t.branch(pc, pc + 2, BranchKind::IndirectJump, to),
            4 if calls.len() < 80 => {
                calls.push(pc + 5);
                t.branch(pc, pc + 5, BranchKind::DirectCall { target: to }, to)
            }
            5 if !calls.is_empty() => {
                let back = calls.pop().unwrap();
                t.branch(pc, pc + 1, BranchKind::Return, back)
            }
            6 => {
                t.far_transfer(FarKind::Syscall, KERNEL_ENTRY, Context::KERNEL64);
                t.far_transfer(FarKind::Sysret, pc + 2, Context::USER64);
            }
            _ => t.branch(pc, pc + 5, BranchKind::DirectJump { target: to }, to),
        }
        pc = to;
        drain(t, next() % 8);
    }
    t.finish();
}

#[test]
fn counters_balance_and_nothing_accepted_is_lost() {
    let t = Tracer::new(user_cfg(), Context::USER64).with_packet_log().with_internal_buffer(buffer(128, 64, 1, 4));
    let mut r = Run::with(t);
    let mut mem = Vec::new();
    workload(&mut r.t, 20_000, |t, units| {
        t.credit(units);
        mem.extend_from_slice(&t.take_output());
    });
    r.mem = mem;
    let (log, mem, stats) = r.finish();
    assert!(stats.overflows > 10, "the workload overflows a 128-byte buffer: {stats}");
    assert!(stats.dropped_packets > stats.overflows);
    assert_eq!(stats.accepted_bytes, mem.len() as u64);
    assert_eq!(stats.accepted_packets, log.len() as u64);
    assert!(stats.high_water <= 128);
    // Every OVF is followed by its FUP or, with PacketEn = 0, by the next enable.
    for (i, _) in log.iter().enumerate().filter(|(_, p)| **p == Ovf) {
        assert!(matches!(log.get(i + 1).copied(), None | Some(Fup(_)) | Some(TipPge(_)) | Some(M64) | Some(Psb)), "{:?}", &log[i..]);
    }
}

#[test]
fn drain_progress_is_a_function_of_guest_progress() {
    let go = || {
        let mut t = Tracer::new(user_cfg(), Context::USER64).with_internal_buffer(buffer(256, 128, 1, 4));
        let mut mem = Vec::new();
        let mut released = Vec::new();
        workload(&mut t, 5_000, |t, units| {
            t.credit(units);
            let out = t.take_output();
            released.push(out.len());
            mem.extend_from_slice(&out);
        });
        mem.extend_from_slice(&t.take_output());
        (mem, released, t.buffer_stats().unwrap())
    };
    let (a, ra, sa) = go();
    let (b, rb, sb) = go();
    assert_eq!(a, b, "same guest progress, same stream");
    assert_eq!(ra, rb);
    assert_eq!(sa, sb);
    assert!(sa.overflows > 0);

    // 3 bytes per 4 instructions, the fraction carried.
    let mut t = Tracer::new(user_cfg(), Context::USER64).with_internal_buffer(buffer(256, 128, 3, 4));
    t.enable(0x401000); // 29 bytes pending
    t.credit(1);
    assert_eq!(t.take_output().len(), 0);
    t.credit(1);
    assert_eq!(t.take_output().len(), 1);
    t.credit(6);
    assert_eq!(t.take_output().len(), 5);
}

#[test]
fn a_buffer_that_never_fills_is_byte_identical_to_no_buffer() {
    let plain = {
        let mut t = Tracer::new(user_cfg(), Context::USER64);
        let mut mem = Vec::new();
        workload(&mut t, 5_000, |t, _| mem.extend_from_slice(&t.take_output()));
        mem.extend_from_slice(&t.take_output());
        mem
    };
    // Drained after every event, and never drained until the end.
    for per_event in [true, false] {
        let mut t = Tracer::new(user_cfg(), Context::USER64).with_internal_buffer(buffer(1 << 20, 1 << 19, 1, 1));
        let mut mem = Vec::new();
        workload(&mut t, 5_000, |t, _| {
            if per_event {
                t.credit_bytes(u64::MAX);
                mem.extend_from_slice(&t.take_output());
            }
        });
        mem.extend_from_slice(&t.take_output());
        assert_eq!(mem, plain);
        assert_eq!(t.buffer_stats().unwrap().overflows, 0);
    }
}

#[derive(Clone)]
struct FakeClock(Arc<AtomicU64>);

impl DrainClock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn real_time_mode_credit_from_the_drainer_thread_releases_bytes() {
    let now = Arc::new(AtomicU64::new(0));
    let drainer = RealTimeDrainer::spawn(FakeClock(Arc::clone(&now)), 1_000, Duration::from_micros(200)).unwrap();
    let mut credit = drainer.credit();
    let mut t = Tracer::new(user_cfg(), Context::USER64).with_internal_buffer(buffer(256, 128, 1, 1));
    t.enable(0x401000); // 29 bytes
    t.credit_from(&mut credit);
    assert!(t.output().is_empty());
    now.store(10_000_000, Ordering::SeqCst); // 10 ms at 1000 B/s = 10 bytes
    let start = Instant::now();
    while drainer.granted() < 10 {
        assert!(start.elapsed() < Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(1));
    }
    t.credit_from(&mut credit);
    assert_eq!(t.take_output(), [0x02, 0x82].repeat(5));
}
