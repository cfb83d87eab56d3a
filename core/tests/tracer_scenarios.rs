//! Golden packet streams of the PT model, one test per scenario (names follow libipt's .ptt
//! scenario names where one exists). Every stream is also checked to decode back through the
//! project's packet decoder to the same packets.

use pttrace_core::insn_class::{BranchKind, ClassifiedInsn, FarKind};
use pttrace_core::pt::decode::PacketDecoder;
use pttrace_core::pt::packet::{ExecMode, IpCompression as C, IpPayload, Packet};
use pttrace_core::pt::rtit_ctl::{AddrCfg, AddrRange, RtitCtl};
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};
use pttrace_core::user_flow::{BlockEnd, UserFlow};

fn leak(e: BlockEnd) -> &'static BlockEnd {
    Box::leak(Box::new(e))
}

use Packet::*;

fn ip(c: C, payload: u64) -> IpPayload {
    IpPayload { compression: c, payload }
}

const NOIP: IpPayload = IpPayload::SUPPRESSED;
const M64: Packet = ModeExec { mode: ExecMode::Bit64, if_flag: false };

/// User-only branch tracing as `perf record -e intel_pt//u` configures it, without TSC.
fn user_cfg() -> TraceConfig {
    let mut ctl = RtitCtl::default();
    ctl.set_user(true).set_branch_en(true);
    TraceConfig { ctl, ..TraceConfig::default() }
}

fn tracer(cfg: TraceConfig, ctx: Context) -> Tracer {
    Tracer::new(cfg, ctx).with_packet_log()
}

/// Take the packet log and check that the bytes decode to the same packets.
fn packets(t: &mut Tracer) -> Vec<Packet> {
    t.finish();
    let log = t.take_packet_log();
    let bytes = t.take_output();
    let decoded: Vec<Packet> = PacketDecoder::new(&bytes).map(|d| d.expect("decodes").packet).collect();
    assert_eq!(decoded, log, "bytes and packet log disagree");
    log
}

const PSB_PLUS_NO_FUP: [Packet; 3] = [Psb, Cbr { ratio: 24 }, PsbEnd];

fn with_psb(rest: &[Packet]) -> Vec<Packet> {
    let mut v = PSB_PLUS_NO_FUP.to_vec();
    v.extend_from_slice(rest);
    v
}

#[test]
fn psb_mode_exec_tip_pge_on_enable_in_traced_context() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000))]));
}

#[test]
fn tsc_in_psb_plus_when_tsc_en() {
    let mut cfg = user_cfg();
    cfg.ctl.set_tsc_en(true);
    let mut t = tracer(cfg, Context::USER64);
    t.set_tsc(0x1234);
    t.enable(0x401000);
    let p = packets(&mut t);
    assert_eq!(&p[..4], &[Psb, Tsc { tsc: 0x1234 }, Cbr { ratio: 24 }, PsbEnd]);
}

#[test]
fn loop_tnt_bits_in_retirement_order_and_flushed_before_tip() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    let jcc = BranchKind::Conditional { target: 0x401000 };
    // taken x7 then not-taken: one full TNT of 6, then 2 pending flushed by the TIP.
    for _ in 0..7 {
        t.branch(0x401010, 0x401012, jcc, 0x401000);
    }
    t.branch(0x401010, 0x401012, jcc, 0x401012);
    t.branch(0x401012, 0x401014, BranchKind::IndirectJump, 0x401800);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            Tnt { bits: 0b111111, count: 6 },
            Tnt { bits: 0b10, count: 2 },
            Tip(ip(C::Update16, 0x1800)),
        ])
    );
}

#[test]
fn call_direct_ret_compressed_and_noretcomp_ret_uncompressed() {
    for dis_retc in [false, true] {
        let mut cfg = user_cfg();
        cfg.ctl.set_dis_retc(dis_retc);
        let mut t = tracer(cfg, Context::USER64);
        t.enable(0x401000);
        t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x402000 }, 0x402000);
        t.branch(0x402000, 0x402001, BranchKind::Return, 0x401005);
        let tail = if dis_retc { Tip(ip(C::Update16, 0x1005)) } else { Tnt { bits: 1, count: 1 } };
        assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), tail]));
    }
}

#[test]
fn call_indirect_ret_compressed() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401002, BranchKind::IndirectCall, 0x402000);
    t.branch(0x402000, 0x402001, BranchKind::Return, 0x401002);
    assert_eq!(
        packets(&mut t),
        with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), Tip(ip(C::Update16, 0x2000)), Tnt { bits: 1, count: 1 }])
    );
}

#[test]
fn call_with_zero_displacement_is_not_a_call_for_ret_compression() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    // call next; pop rax ... ret to a caller-pushed address 0x401005 must not compress.
    t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x401005 }, 0x401005);
    t.branch(0x401006, 0x401007, BranchKind::Return, 0x401005);
    assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), Tip(ip(C::Update16, 0x1005))]));
}

#[test]
fn ret_that_does_not_match_its_call_is_a_tip_and_later_rets_still_decode() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x402000 }, 0x402000);
    t.branch(0x402000, 0x402005, BranchKind::DirectCall { target: 0x403000 }, 0x403000);
    // longjmp-like: the inner function returns straight to the outer caller's site.
    t.branch(0x403000, 0x403001, BranchKind::Return, 0x401005);
    // The stack was cleared, so the next matching-looking RET is not compressed either.
    t.branch(0x401005, 0x401006, BranchKind::Return, 0x402005);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            Tip(ip(C::Update16, 0x1005)),
            Tip(ip(C::Update16, 0x2005)),
        ])
    );
}

#[test]
fn sixty_five_nested_calls_leave_the_outermost_ret_uncompressed() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x400000);
    for d in 0..65u64 {
        let site = 0x400000 + d * 0x10;
        t.branch(site, site + 5, BranchKind::DirectCall { target: site + 0x10 }, site + 0x10);
    }
    for d in (0..65u64).rev() {
        let site = 0x400000 + d * 0x10;
        t.branch(0x500000, 0x500001, BranchKind::Return, site + 5);
    }
    let p = packets(&mut t);
    let bits: u32 = p
        .iter()
        .map(|p| match p {
            Tnt { count, .. } => u32::from(*count),
            _ => 0,
        })
        .sum();
    assert_eq!(bits, 64, "64 compressed RETs");
    assert_eq!(p.last(), Some(&Tip(ip(C::Update16, 0x0005))));
}

#[test]
fn syscall_user_only_tip_pgd_noip_then_tip_pge_after_return() {
    // direct_call-tip_pgd_noip-syscall / syscall-sysret-cpl_3 in libipt's scenarios.
    let mut t = tracer(user_cfg(), Context::USER64);
    let mut flow = UserFlow::default();
    flow.start(&mut t);
    let mut no_signal = |_pc: u64| None;
    let syscall: &BlockEnd = leak(BlockEnd::new(ClassifiedInsn { ip: 0x401010, len: 2, kind: BranchKind::Far(FarKind::Syscall), rep_string: false }));
    let jmp: &BlockEnd = leak(BlockEnd::new(ClassifiedInsn {
            ip: 0x401020,
            len: 2,
            kind: BranchKind::DirectJump { target: 0x401000 },
            rep_string: false,
        }));
    flow.block(&mut t, 0x401000, syscall, &mut no_signal);
    flow.block(&mut t, 0x401012, jmp, &mut no_signal);
    flow.finish(&mut t);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            TipPgd(NOIP),
            TipPge(ip(C::Update16, 0x1012)),
        ])
    );
}

#[test]
fn asynchronous_signal_is_fup_of_interrupted_ip_tip_pgd_then_tip_pge_at_handler() {
    let mut t = tracer(user_cfg(), Context::USER64);
    let mut flow = UserFlow::default();
    flow.start(&mut t);
    let jcc: &BlockEnd = leak(BlockEnd::new(ClassifiedInsn {
            ip: 0x401008,
            len: 2,
            kind: BranchKind::Conditional { target: 0x401000 },
            rep_string: false,
        }));
    let handler_end: &BlockEnd = leak(BlockEnd::new(ClassifiedInsn { ip: 0x405000, len: 1, kind: BranchKind::Return, rep_string: false }));
    // The loop block ran, then the kernel delivered a signal before the next block: the frame
    // says the Jcc was taken (resume at 0x401000).
    let mut probe = |pc: u64| (pc == 0x405000).then_some(0x401000);
    flow.block(&mut t, 0x401000, jcc, &mut probe);
    flow.block(&mut t, 0x405000, handler_end, &mut probe);
    assert_eq!(flow.stats().signals, 1);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            Tnt { bits: 1, count: 1 },
            Fup(ip(C::Update16, 0x1000)),
            TipPgd(NOIP),
            TipPge(ip(C::Update16, 0x5000)),
        ])
    );
}

#[test]
fn int_n_sends_fup_of_the_int_instruction_itself() {
    let mut cfg = user_cfg();
    cfg.ctl.set_os(true);
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    let kernel = Context { cpl: 0, ..Context::USER64 };
    t.async_event(AsyncKind::SoftwareInterrupt { ip: 0x401000 }, 0xffff_ffff_8100_0000, kernel);
    t.async_event(AsyncKind::Fault { ip: 0xffff_ffff_8100_0000 }, 0xffff_ffff_8100_1000, kernel);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0xffff_ffff_8100_1004 }, 0xffff_ffff_8100_2000, kernel);
    // OS=1 and ContextEn: PSB+ carries a PIP.
    assert_eq!(
        packets(&mut t),
        [Psb, Pip { cr3: 0, nr: false }, Cbr { ratio: 24 }, PsbEnd]
            .into_iter()
            .chain([
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            Fup(ip(C::Update16, 0x1000)),
            Tip(ip(C::Sext48, 0xffff_8100_0000)),
            Fup(ip(C::Update16, 0x0000)),
            Tip(ip(C::Update16, 0x1000)),
            Fup(ip(C::Update16, 0x1004)),
            Tip(ip(C::Update16, 0x2000)),
        ])
        .collect::<Vec<_>>()
    );
}

#[test]
fn far_transfer_into_32bit_code_sends_mode_exec_before_tip() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    let compat = Context { mode: ExecMode::Bit32, ..Context::USER64 };
    t.far_transfer(FarKind::FarJmp, 0x8000, compat);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            ModeExec { mode: ExecMode::Bit32, if_flag: false },
            Tip(ip(C::Update32, 0x8000)),
        ])
    );
}

#[test]
fn pip_on_far_transfer_that_switches_cr3_when_os_is_traced() {
    let mut cfg = user_cfg();
    cfg.ctl.set_os(true);
    let k = Context { cpl: 0, cr3: 0x1000, mode: ExecMode::Bit64 };
    let mut t = tracer(cfg, k);
    t.enable(0xffff_ffff_8100_0000);
    let u = Context { cpl: 3, cr3: 0x2000, mode: ExecMode::Bit64 };
    t.far_transfer(FarKind::Iret, 0x401000, u);
    let p = packets(&mut t);
    assert_eq!(&p[..2], &[Psb, Pip { cr3: 0x1000, nr: false }]);
    assert_eq!(&p[p.len() - 2..], &[Pip { cr3: 0x2000, nr: false }, Tip(ip(C::Sext48, 0x401000))]);
}

#[test]
fn psb_period_inserts_psb_plus_with_fup_of_next_ip_and_resets_compression() {
    let mut t = tracer(user_cfg(), Context::USER64); // PSBFreq 0: every 2 KiB
    t.enable(0x401000);
    let mut n = 0;
    while t.stats().psbs < 2 {
        // indirect jumps alternating between two targets: 3-byte TIPs
        let target = if n % 2 == 0 { 0x401100 } else { 0x401200 };
        t.branch(0x401000, 0x401002, BranchKind::IndirectJump, target);
        n += 1;
    }
    let p = packets(&mut t);
    let psb_at = p.iter().rposition(|x| *x == Psb).unwrap();
    let last_target = if (n - 1) % 2 == 0 { 0x401100 } else { 0x401200 };
    assert_eq!(
        &p[psb_at..],
        &[Psb, Cbr { ratio: 24 }, M64, Fup(ip(C::Update32, last_target)), PsbEnd]
    );
    // The PSB comes once 2048 bytes were written since the first PSB+ ended.
    assert!(n > 600 && n < 700, "{n} TIPs before the second PSB");
}

#[test]
fn fup_tip_pgd_when_wrmsr_clears_trace_en() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401002, BranchKind::Conditional { target: 0x401010 }, 0x401010);
    t.disable(0x401020);
    assert!(!t.trace_en());
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            Tnt { bits: 1, count: 1 },
            Fup(ip(C::Update16, 0x1020)),
            TipPgd(NOIP),
        ])
    );
}

#[test]
fn tip_pgd_indirect_jump_out_of_filter_range_and_tip_pge_on_return() {
    let mut cfg = user_cfg();
    cfg.ctl.set_addr_cfg(0, AddrCfg::Filter);
    cfg.addr[0] = AddrRange { a: 0x401000, b: 0x401fff };
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x500000);
    t.branch(0x500000, 0x500002, BranchKind::Conditional { target: 0x500010 }, 0x500010); // untraced
    t.branch(0x500010, 0x500012, BranchKind::IndirectJump, 0x401800);
    assert_eq!(
        packets(&mut t),
        with_psb(&[
            M64,
            TipPge(ip(C::Update32, 0x401000)),
            TipPgd(ip(C::Update32, 0x500000)),
            TipPge(ip(C::Update32, 0x401800)),
        ])
    );
}

#[test]
fn psb_stop_trace_stop_range_sets_stopped_and_ends_packets() {
    let mut cfg = user_cfg();
    cfg.ctl.set_addr_cfg(1, AddrCfg::TraceStop);
    cfg.addr[1] = AddrRange { a: 0x402000, b: 0x402fff };
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x402000 }, 0x402000);
    t.branch(0x402000, 0x402002, BranchKind::IndirectJump, 0x401000);
    assert!(t.stopped());
    assert!(t.trace_stop_hit());
    assert!(!t.packet_en());
    let (filter_en, _context_en, trigger_en) = t.status_bits();
    assert!(!filter_en && !trigger_en, "TraceStop forces FilterEn = 0 and clears TriggerEn");
    assert_eq!(
        packets(&mut t),
        with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), TipPgd(ip(C::Update16, 0x2000)), TraceStop])
    );
}

#[test]
fn kernel_only_tracing_has_no_packets_in_user_code() {
    let mut cfg = user_cfg();
    cfg.ctl.set_user(false).set_os(true);
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x401100);
    assert_eq!(packets(&mut t), PSB_PLUS_NO_FUP.to_vec());
}

#[test]
fn branch_en_clear_produces_no_cofi_packets() {
    let mut cfg = user_cfg();
    cfg.ctl.set_branch_en(false);
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x401100);
    assert_eq!(packets(&mut t), PSB_PLUS_NO_FUP.to_vec());
}

#[test]
fn wrmsr_rtit_ctl_toggles_tracing_with_the_new_configuration() {
    let mut t = tracer(TraceConfig::default(), Context::USER64);
    let mut on = RtitCtl::default();
    on.set_trace_en(true).set_user(true).set_branch_en(true);
    t.write_ctl(0x401000, 0x401003, on);
    assert!(t.trace_en() && t.packet_en());
    t.branch(0x401003, 0x401005, BranchKind::Conditional { target: 0x401010 }, 0x401005);
    let mut off = on;
    off.set_trace_en(false);
    t.write_ctl(0x401005, 0x401008, off);
    assert!(!t.trace_en());
    // Re-enabling with OS only: PSB+ again, no TIP.PGE in user code.
    let mut os_only = on;
    os_only.set_user(false).set_os(true);
    t.write_ctl(0x401008, 0x40100b, os_only);
    assert!(t.trace_en() && !t.packet_en());
    let mut expected = with_psb(&[M64, TipPge(ip(C::Update32, 0x401003)), Tnt { bits: 0, count: 1 }]);
    expected.extend([Fup(ip(C::Update16, 0x1005)), TipPgd(NOIP)]);
    expected.extend(PSB_PLUS_NO_FUP);
    assert_eq!(packets(&mut t), expected);
}

#[test]
fn enable_with_a_restored_packet_byte_count_continues_without_psb() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.set_packet_byte_count(100);
    t.enable(0x401000);
    assert_eq!(t.packet_byte_count(), 100 + 2 + 5, "MODE.Exec and TIP.PGE counted on top");
    assert_eq!(packets(&mut t), [M64, TipPge(ip(C::Update32, 0x401000))]);
}

#[test]
fn mtc_when_ctc_advances_and_cyc_past_the_threshold_before_the_event_packets() {
    use pttrace_core::pt::tracer::ART_RATIO as R;
    let mut cfg = user_cfg();
    cfg.ctl.set_tsc_en(true).set_mtc_en(true).set_mtc_freq(3).set_cyc_en(true).set_cyc_thresh(3);
    let mut t = tracer(cfg, Context::USER64);
    t.set_tsc(0x100 * R + R / 2);
    t.enable(0x401000);
    let head = t.take_packet_log();
    // PSB+ carries TSC and TMA (CTC[15:0] = ART at that TSC, fast counter = the half ART tick).
    assert_eq!(
        &head[..4],
        &[Psb, Tsc { tsc: 0x100 * R + R / 2 }, Tma { ctc: 0x100, fast_counter: (R / 2) as u16 }, Cbr { ratio: 24 }]
    );
    // 3 ART ticks: same CTC (ART >> 3 = 0x20), but 3*R cycles are past the CYC threshold 2^(3-1).
    t.set_tsc(0x103 * R + R / 2);
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x401100);
    assert_eq!(t.take_packet_log(), [Cyc { value: 3 * R }, Tip(ip(C::Update16, 0x1100))]);
    // Still the same TSC: no CYC (0 cycles is below the threshold), no MTC.
    t.branch(0x401100, 0x401102, BranchKind::IndirectJump, 0x401180);
    assert_eq!(t.take_packet_log(), [Tip(ip(C::Update16, 0x1180))]);
    // ART 0x108: CTC advanced to 0x21: MTC(0x21), CYC, then the TIP.
    t.set_tsc(0x108 * R);
    t.branch(0x401180, 0x401182, BranchKind::IndirectJump, 0x401200);
    assert_eq!(t.take_packet_log(), [Mtc { ctc: 0x21 }, Cyc { value: 4 * R + R / 2 }, Tip(ip(C::Update16, 0x1200))]);
}

#[test]
fn long_gap_between_events_sends_tsc_and_tma_instead_of_an_ambiguous_mtc() {
    use pttrace_core::pt::tracer::ART_RATIO as R;
    let mut cfg = user_cfg();
    cfg.ctl.set_tsc_en(true).set_mtc_en(true).set_mtc_freq(0);
    let mut t = tracer(cfg, Context::USER64);
    t.set_tsc(0);
    t.enable(0x401000);
    t.take_packet_log();
    // 300 ART periods later (more than the 8-bit MTC payload can tell apart reliably).
    t.set_tsc(300 * R + 5);
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x401100);
    assert_eq!(
        t.take_packet_log(),
        [Tsc { tsc: 300 * R + 5 }, Tma { ctc: 300, fast_counter: 5 }, Tip(ip(C::Update16, 0x1100))]
    );
    // A short step afterwards is an MTC again.
    t.set_tsc(302 * R);
    t.branch(0x401100, 0x401102, BranchKind::IndirectJump, 0x401200);
    assert_eq!(t.take_packet_log(), [Mtc { ctc: 302u64 as u8 }, Tip(ip(C::Update16, 0x1200))]);
}

/// Regression (fuzz/artifacts-found/msr_sequences-pip-cr3-lam-bits): CR3 with the LAM bits
/// CR3[62:61] set; PIP carries CR3[51:5] only (debug builds used to panic in the encoder).
#[test]
fn pip_of_a_cr3_with_lam_bits_carries_only_the_address_bits() {
    use pttrace_core::pt::packet::Packet;
    use pttrace_core::pt::rtit_ctl::RtitCtl;
    use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};
    let mut ctl = RtitCtl::default();
    ctl.set_os(true).set_branch_en(true).set_trace_en(true);
    let ctx = Context { cr3: 0x2000_0000_0000_1000, ..Context::KERNEL64 };
    let mut t = Tracer::new(TraceConfig { ctl, ..TraceConfig::default() }, ctx).with_packet_log();
    t.enable(0x1000);
    let log = t.take_packet_log();
    assert!(log.iter().any(|p| matches!(p, Packet::Pip { cr3: 0x1000, .. })), "{log:?}");
}

// ---- IA32_RTIT_CTL[55] DisTNT (CPUID.(14H,0):EBX[8]) ----

#[test]
fn dis_tnt_loop_sends_no_tnt_and_the_indirect_jump_still_sends_its_tip() {
    let mut cfg = user_cfg();
    cfg.ctl.set_dis_tnt(true);
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    let jcc = BranchKind::Conditional { target: 0x401000 };
    for _ in 0..7 {
        t.branch(0x401010, 0x401012, jcc, 0x401000);
    }
    t.branch(0x401010, 0x401012, jcc, 0x401012);
    t.branch(0x401012, 0x401014, BranchKind::IndirectJump, 0x401800);
    assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), Tip(ip(C::Update16, 0x1800))]));
    assert_eq!(t.stats().tnt_bits, 0);
}

#[test]
fn dis_tnt_compressed_ret_sends_nothing_and_noretcomp_ret_sends_its_tip() {
    for dis_retc in [false, true] {
        let mut cfg = user_cfg();
        cfg.ctl.set_dis_tnt(true).set_dis_retc(dis_retc);
        let mut t = tracer(cfg, Context::USER64);
        t.enable(0x401000);
        t.branch(0x401000, 0x401002, BranchKind::IndirectCall, 0x402000);
        t.branch(0x402000, 0x402001, BranchKind::Return, 0x401002);
        let mut want = vec![M64, TipPge(ip(C::Update32, 0x401000)), Tip(ip(C::Update16, 0x2000))];
        if dis_retc {
            want.push(Tip(ip(C::Update16, 0x1002)));
        }
        assert_eq!(packets(&mut t), with_psb(&want), "DisRETC = {dis_retc}");
    }
}

#[test]
fn dis_tnt_conditional_branch_leaving_the_filter_range_still_sends_tip_pgd() {
    let mut cfg = user_cfg();
    cfg.ctl.set_dis_tnt(true).set_addr_cfg(0, AddrCfg::Filter);
    cfg.addr[0] = AddrRange { a: 0x401000, b: 0x401fff };
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    t.branch(0x401010, 0x401012, BranchKind::Conditional { target: 0x401000 }, 0x401000);
    t.branch(0x401010, 0x401012, BranchKind::Conditional { target: 0x405000 }, 0x405000);
    assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000)), TipPgd(NOIP)]));
}

#[test]
fn dis_tnt_direct_steady_shortcut_is_not_taken() {
    let mut cfg = user_cfg();
    cfg.ctl.set_dis_tnt(true);
    let mut t = tracer(cfg, Context::USER64);
    t.enable(0x401000);
    // The steady-state shortcut records TNT bits: with DisTNT the general path must run.
    assert!(!t.direct_steady(0x401000, true, true, 0));
}

// ---- PSB preservation: IA32_RTIT_STATUS[6] PendPSB with InjectPsbPmiOnEnable ----

#[test]
fn restored_packet_byte_count_continues_the_period_without_psb_at_enable() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.set_packet_byte_count(2040);
    t.enable(0x401000);
    assert_eq!(packets(&mut t), vec![M64, TipPge(ip(C::Update32, 0x401000))]);
    assert!(!t.psb_due(), "2040 + 7 bytes: one short of the 2 KiB period");
}

#[test]
fn pend_psb_inserts_psb_plus_at_enable_whatever_packet_byte_count_holds() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.set_packet_byte_count(2040);
    t.inject_psb_at_enable();
    t.enable(0x401000);
    assert_eq!(packets(&mut t), with_psb(&[M64, TipPge(ip(C::Update32, 0x401000))]));
    assert!(!t.psb_due());
}

#[test]
fn psb_due_after_the_disabling_fup_and_tip_pgd_cross_the_period() {
    let mut t = tracer(user_cfg(), Context::USER64);
    t.set_packet_byte_count(2040);
    t.enable(0x401000);
    t.disable(0x401010);
    // MODE.Exec 2 + TIP.PGE 5 + FUP 3 + TIP.PGD 1: 2051 bytes, no PSB+ inserted.
    assert_eq!(t.packet_byte_count(), 2051);
    assert!(t.psb_due());
    assert!(!packets(&mut t).contains(&Psb));
}

// ---- power event trace: IA32_RTIT_CTL[4] PwrEvtEn ----

fn kernel_pwr_cfg(pwr: bool, branch: bool) -> TraceConfig {
    let mut ctl = RtitCtl::default();
    ctl.set_os(true).set_branch_en(branch).set_pwr_evt_en(pwr);
    TraceConfig { ctl, ..TraceConfig::default() }
}

#[test]
fn hlt_woken_by_an_interrupt_pwre_exstop_ip_fup_then_pwrx_before_the_interrupt_fup_tip() {
    let mut t = tracer(kernel_pwr_cfg(true, true), Context::KERNEL64);
    t.enable(0x101000);
    t.branch(0x101000, 0x101002, BranchKind::Conditional { target: 0x101010 }, 0x101010);
    t.halt(0x101010);
    t.wake(pttrace_core::pt::packet::PWRX_WAKE_INTERRUPT);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x101011 }, 0x102000, Context::KERNEL64);
    let p = packets(&mut t);
    let after_pge = &p[p.iter().position(|x| matches!(x, TipPge(_))).unwrap() + 1..];
    assert_eq!(
        after_pge,
        &[
            Tnt { bits: 1, count: 1 },
            Pwre { state: 0, sub_state: 0, hw: false },
            Exstop { ip: true },
            Fup(ip(C::Update16, 0x1010)),
            Pwrx { last: 0, deepest: 0, wake: 1 },
            Fup(ip(C::Update16, 0x1011)),
            Tip(ip(C::Update16, 0x2000)),
        ]
    );
}

#[test]
fn hlt_without_branch_tracing_exstop_has_no_ip_and_no_fup() {
    let mut t = tracer(kernel_pwr_cfg(true, false), Context::KERNEL64);
    t.enable(0x101000);
    t.halt(0x101010);
    t.wake(pttrace_core::pt::packet::PWRX_WAKE_INTERRUPT);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x101011 }, 0x102000, Context::KERNEL64);
    let p = packets(&mut t);
    let after = &p[p.iter().position(|x| *x == PsbEnd).unwrap() + 1..];
    assert_eq!(after, &[Pwre { state: 0, sub_state: 0, hw: false }, Exstop { ip: false }, Pwrx { last: 0, deepest: 0, wake: 1 }]);
}

#[test]
fn hlt_without_pwr_evt_en_sends_no_power_packets() {
    let mut t = tracer(kernel_pwr_cfg(false, true), Context::KERNEL64);
    t.enable(0x101000);
    t.halt(0x101010);
    t.wake(pttrace_core::pt::packet::PWRX_WAKE_INTERRUPT);
    assert!(!packets(&mut t).iter().any(|p| matches!(p, Pwre { .. } | Pwrx { .. } | Exstop { .. })));
}

#[test]
fn mwait_c6_hints_precede_pwre_with_the_hinted_state() {
    let mut t = tracer(kernel_pwr_cfg(true, true), Context::KERNEL64);
    t.enable(0x101000);
    t.mwait(0x101010, 0x50, 1);
    t.wake(pttrace_core::pt::packet::PWRX_WAKE_INTERRUPT);
    let p = packets(&mut t);
    let after_pge = &p[p.iter().position(|x| matches!(x, TipPge(_))).unwrap() + 1..];
    assert_eq!(
        after_pge,
        &[
            Mwait { hints: 0x50, ext: 1 },
            Pwre { state: 5, sub_state: 0, hw: false },
            Exstop { ip: true },
            Fup(ip(C::Update16, 0x1010)),
            Pwrx { last: 5, deepest: 5, wake: 1 },
        ]
    );
}

// ---- Event Trace: IA32_RTIT_CTL[31] EventEn ----

fn event_cfg(event_en: bool) -> TraceConfig {
    let mut ctl = RtitCtl::default();
    ctl.set_os(true).set_branch_en(true).set_event_en(event_en);
    TraceConfig { ctl, ..TraceConfig::default() }
}

const M64_IF: Packet = ModeExec { mode: ExecMode::Bit64, if_flag: true };

fn after_pge(p: &[Packet]) -> Vec<Packet> {
    p[p.iter().position(|x| matches!(x, TipPge(_))).unwrap() + 1..].to_vec()
}

#[test]
fn event_en_interrupt_cfe_intr_without_ip_attaches_to_its_fup_and_the_gate_clearing_if_in_mode_exec() {
    let mut t = tracer(event_cfg(true), Context::KERNEL64);
    t.set_if(true);
    t.enable(0x101000);
    t.cfe_interrupt(0x40, None);
    t.stage_event_if(false);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x101004 }, 0x102000, Context::KERNEL64);
    let p = packets(&mut t);
    assert_eq!(p[p.iter().position(|x| matches!(x, TipPge(_))).unwrap() - 1], M64_IF, "MODE.Exec IF = 1 at enable");
    assert_eq!(
        after_pge(&p),
        [
            Cfe { ip: false, kind: 1, vector: 0x40 },
            Fup(ip(C::Update16, 0x1004)),
            M64,
            Tip(ip(C::Update16, 0x2000)),
        ]
    );
}

#[test]
fn event_en_page_fault_evd_cr2_precedes_its_cfe() {
    let mut t = tracer(event_cfg(true), Context::KERNEL64);
    t.enable(0x101000);
    t.cfe_interrupt(14, Some(0x8000_0000));
    t.async_event(AsyncKind::Fault { ip: 0x101000 }, 0x102000, Context::KERNEL64);
    assert_eq!(
        after_pge(&packets(&mut t))[..3],
        [Evd { kind: 0, payload: 0x8000_0000 }, Cfe { ip: false, kind: 1, vector: 14 }, Fup(ip(C::Update16, 0x1000))]
    );
}

#[test]
fn event_en_iret_cfe_iret_fup_of_the_iret_mode_exec_if_then_tip() {
    let mut t = tracer(event_cfg(true), Context::KERNEL64);
    t.enable(0x102000);
    t.cfe_iret(0x102010);
    t.stage_if(true);
    t.far_transfer(FarKind::Iret, 0x101004, Context::KERNEL64);
    assert_eq!(
        after_pge(&packets(&mut t)),
        [Cfe { ip: true, kind: 2, vector: 0 }, Fup(ip(C::Update16, 0x2010)), M64_IF, Tip(ip(C::Update16, 0x1004))]
    );
}

#[test]
fn event_en_sti_mode_exec_if_and_fup_of_the_next_instruction() {
    // libipt mode_exec-if.ptt: sti -> mode.exec(64bit, if), fup(NLIP); cli -> mode.exec(64bit), fup.
    let mut t = tracer(event_cfg(true), Context::KERNEL64);
    t.enable(0x101000);
    t.stage_if(true);
    t.if_boundary(0x101001);
    t.stage_if(true);
    t.if_boundary(0x101005); // unchanged: nothing
    t.stage_if(false);
    t.if_boundary(0x101006);
    assert_eq!(
        after_pge(&packets(&mut t)),
        [M64_IF, Fup(ip(C::Update16, 0x1001)), M64, Fup(ip(C::Update16, 0x1006))]
    );
}

#[test]
fn without_event_en_the_event_trace_calls_send_nothing_and_mode_exec_has_no_if() {
    let mut t = tracer(event_cfg(false), Context::KERNEL64);
    t.set_if(true);
    t.enable(0x101000);
    t.stage_if(false);
    t.if_boundary(0x101001);
    t.cfe_interrupt(0x40, None);
    t.stage_event_if(false);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x101004 }, 0x102000, Context::KERNEL64);
    t.cfe_iret(0x102010);
    t.far_transfer(FarKind::Iret, 0x101004, Context::KERNEL64);
    let p = packets(&mut t);
    assert!(!p.iter().any(|x| matches!(x, Cfe { .. } | Evd { .. } | ModeExec { if_flag: true, .. })));
    assert_eq!(after_pge(&p), [Fup(ip(C::Update16, 0x1004)), Tip(ip(C::Update16, 0x2000)), Tip(ip(C::Update16, 0x1004))]);
}

#[test]
fn event_en_interrupt_right_after_an_iret_keeps_both_cfes_and_both_if_changes() {
    // Announced in this order at the delivery: the interrupt's CFE and IF, then the IRET
    // retires (with the IF it restored), then the interrupt is delivered.
    let mut t = tracer(event_cfg(true), Context::KERNEL64);
    t.enable(0x102000);
    t.cfe_interrupt(0x40, None);
    t.stage_event_if(false);
    t.stage_if(true);
    t.cfe_iret(0x102010);
    t.far_transfer(FarKind::Iret, 0x101004, Context::KERNEL64);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x101004 }, 0x102100, Context::KERNEL64);
    assert_eq!(
        after_pge(&packets(&mut t)),
        [
            Cfe { ip: true, kind: 2, vector: 0 },
            Fup(ip(C::Update16, 0x2010)),
            M64_IF,
            Tip(ip(C::Update16, 0x1004)),
            Cfe { ip: false, kind: 1, vector: 0x40 },
            Fup(ip(C::Update16, 0x1004)),
            M64,
            Tip(ip(C::Update16, 0x2100)),
        ]
    );
}

/// SDM Vol. 3C §33.3.1.1 "Packet Decoding of RIP versus LIP": with CPUID.(EAX=14H,ECX=0):ECX[31]
/// LIP = 0 (every profile here) FUP, TIP, TIP.PGE and TIP.PGD carry the offset from the CS base
/// (CS << 4 in real mode), not the linear address. Real-mode code: enable in CS = 0, far CALL to
/// 300H:0020H (linear 3020H), an indirect JMP there, an interrupt whose handler is F000H:E987H
/// (its FUP binds to the interrupted code in 300H, its TIP to the handler), and the disabling
/// WRMSR in the handler. The tracer is given linear addresses, as the plugin's blocks have them.
#[test]
fn real_mode_ip_payloads_are_offsets_from_the_cs_base() {
    let mut cfg = user_cfg();
    cfg.ctl.set_os(true);
    let real = Context { cpl: 0, cr3: 0, mode: ExecMode::Bit16 };
    let mut t = tracer(cfg, real);
    t.set_ip_base(0);
    t.enable(0x3005);
    t.stage_ip_base(0x3000);
    t.far_transfer(FarKind::FarCall, 0x3020, real);
    t.set_ip_base(0x3000);
    t.branch(0x3022, 0x3024, BranchKind::IndirectJump, 0x3030);
    t.stage_ip_base(0xF0000);
    t.async_event(AsyncKind::Interrupt { resume_ip: 0x3032 }, 0xF_E987, real);
    t.set_ip_base(0xF0000);
    t.disable(0xF_E990);
    let ips: Vec<Packet> =
        packets(&mut t).into_iter().filter(|p| matches!(p, Tip(_) | TipPge(_) | TipPgd(_) | Fup(_))).collect();
    assert_eq!(
        ips,
        [
            TipPge(ip(C::Update16, 0x3005)),
            Tip(ip(C::Update16, 0x0020)),
            Tip(ip(C::Update16, 0x0030)),
            Fup(ip(C::Update16, 0x0032)),
            Tip(ip(C::Update16, 0xE987)),
            Fup(ip(C::Update16, 0xE990)),
            TipPgd(NOIP),
        ]
    );
}

#[test]
fn ip_filter_ranges_compare_offsets_from_the_cs_base_with_lip_0() {
    // SDM Vol. 3C §33.3.1.1: "IP comparison logic, for IP filtering and TraceStop range
    // calculation, is based on the same IP type as these IP packets. For processors that output
    // RIP, the IP comparison mechanism is also based on RIP". A 32-bit code segment with base
    // F0000H; ADDR0 = [11000H, 11FFFH] written as offsets (RIP values). The tracer is given
    // linear addresses.
    let mut cfg = user_cfg();
    cfg.ctl.set_os(true);
    cfg.ctl.set_addr_cfg(0, AddrCfg::Filter);
    cfg.addr[0] = AddrRange { a: 0x11000, b: 0x11fff };
    let pm32 = Context { cpl: 0, cr3: 0, mode: ExecMode::Bit32 };
    let mut t = tracer(cfg, pm32);
    t.set_ip_base(0xF_0000);
    t.enable(0x10_1000); // offset 11000H: inside
    t.branch(0x10_1000, 0x10_1002, BranchKind::IndirectJump, 0x10_2000); // offset 12000H: outside
    t.branch(0x10_2000, 0x10_2002, BranchKind::IndirectJump, 0x10_1800); // back in
    t.stage_ip_base(0);
    t.far_transfer(FarKind::FarJmp, 0x1_1400, pm32); // flat segment, offset 11400H: inside
    t.set_ip_base(0);
    t.stage_ip_base(0);
    t.far_transfer(FarKind::FarJmp, 0x10_1400, pm32); // flat, linear = offset 101400H: outside
    t.set_ip_base(0);
    t.stage_ip_base(0xF_0000);
    t.far_transfer(FarKind::FarJmp, 0x10_1400, pm32); // based again: offset 11400H, inside
    t.set_ip_base(0xF_0000);
    let ips: Vec<Packet> =
        packets(&mut t).into_iter().filter(|p| matches!(p, Tip(_) | TipPge(_) | TipPgd(_) | Fup(_))).collect();
    assert_eq!(
        ips,
        [
            TipPge(ip(C::Update32, 0x1_1000)),
            TipPgd(ip(C::Update16, 0x2000)),
            TipPge(ip(C::Update16, 0x1800)),
            Tip(ip(C::Update16, 0x1400)),
            TipPgd(ip(C::Update32, 0x10_1400)),
            TipPge(ip(C::Update32, 0x1_1400)),
        ]
    );
}
