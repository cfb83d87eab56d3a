//! RTIT Programming Reference v1.05 Table 19 "Packet Generation under Different Enable
//! Conditions": one test per row, named after the row, asserting the exact packet sequence (as
//! values; every stream is also checked to parse back from its bytes to the same packets).
//!
//! Rows 14, 16, 18 and 20 are "impossible, because wouldn't update TNT buffer": their tests show
//! that a conditional branch that starts with PacketEn = 0 leaves RTIT_TNT_BUFF alone.
//!
//! Set-up: user-mode tracing (RTIT_CTL.User) with RTIT_EVENTS.Filter_Event_ID = RANGE0 =
//! [RTIT_LIP0..RTIT_LIP2-1] = [B..L-1]; TraceStop never (Always off).

mod common;

/// Every test sits in `rtit` so `cargo test rtit` selects them.
mod rtit {
    use super::common::*;
    use pttrace_core::guest_mem::SparseMemory;
    use pttrace_core::insn_class::{BranchKind, FarKind};
    use pttrace_core::pt::packet::ExecMode;
    use pttrace_core::pt::tracer::{AsyncKind, Context};
    use pttrace_core::rtit::decode::parse_all;
    use pttrace_core::rtit::msr::*;
    use pttrace_core::rtit::packet::{FupKind, Lip, Packet};
    use pttrace_core::rtit::{RtitOptions, RtitTracer};

    use FupKind::*;
    use Packet::*;

    /// RANGE0 base (RTIT_LIP0) and limit (RTIT_LIP2).
    const B: u64 = 0x7F00_0010_0000;
    const L: u64 = 0x7F00_0020_0000;
    /// Code inside RANGE0.
    const IN: u64 = B + 0x100;
    /// Code outside RANGE0 (same LIP[47:32]).
    const OUT: u64 = 0x7F00_0030_0000;
    /// Where the set-up WRMSRs run.
    const SETUP: u64 = 0x7F00_0040_0000;
    const KERNEL_ENTRY: u64 = 0xFFFF_FFFF_8100_0000;

    const USER: Context = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };
    const KERNEL: Context = Context { cpl: 0, cr3: 0x1000, mode: ExecMode::Bit64 };

    fn full(ip: u64) -> Lip {
        Lip::full(ip)
    }

    struct Rig {
        t: RtitTracer,
        mem: SparseMemory,
    }

    impl Rig {
        /// PSB sent, PacketEn = 0 (FilterEn = 0), executing outside RANGE0 in USER.
        fn new(extra: impl FnOnce(&mut RtitCtl), cr3_match: Option<u64>) -> Rig {
            let mut mem = SparseMemory::new();
            mem.add_ram(0x10_0000, 0x1_0000);
            let mut t = RtitTracer::new(RtitOptions::default(), USER).with_packet_log();
            t.rdmsr(RTIT_CTL).unwrap();
            let mut w = |t: &mut RtitTracer, msr: u32, v: u64| t.wrmsr(msr, v, SETUP, SETUP + 2, &mut mem).unwrap();
            w(&mut t, RTIT_BASE_ADDR, 0x10_0000);
            w(&mut t, RTIT_LIMIT_MASK, 0xFFFF);
            w(&mut t, RTIT_LIP0, B);
            w(&mut t, RTIT_LIP2, L);
            w(&mut t, RTIT_EVENTS, RtitEvents::new(EventId::Range0, EventId::AlwaysOff).0);
            if let Some(m) = cr3_match {
                w(&mut t, RTIT_CR3_MATCH, m);
            }
            let mut ctl = RtitCtl(0);
            ctl.set_user(true).set_trace_en(true);
            extra(&mut ctl);
            w(&mut t, RTIT_CTL, ctl.0);
            ctl.set_trace_active(true);
            w(&mut t, RTIT_CTL, ctl.0);
            assert_eq!(t.take_packet_log(), [Psb]);
            assert!(!t.packet_en());
            Rig { t, mem }
        }

        fn plain() -> Rig {
            Rig::new(|_| {}, None)
        }

        /// Enter RANGE0 with a direct JMP to IN (row 10), then forget the packets: PacketEn = 1 and
        /// RTIT_LAST_LIP = IN.
        fn inside() -> Rig {
            let mut r = Rig::plain();
            r.enter();
            r
        }

        fn enter(&mut self) {
            self.t.branch(SETUP + 0x10, SETUP + 0x15, BranchKind::DirectJump { target: IN }, IN);
            assert_eq!(self.t.take_packet_log(), [fup(Pge, full(IN))]);
            assert!(self.t.packet_en());
        }

        /// `n` conditional branches inside RANGE0, alternately taken and not taken (taken first):
        /// returns the TNT bits they leave.
        fn tnt(&mut self, n: u8) -> u8 {
            let mut bits = 0;
            for k in 0..n {
                let ip = IN + 0x400 + 0x10 * u64::from(k);
                let taken = k % 2 == 0;
                let target = IN + 0x800;
                self.t.branch(ip, ip + 2, BranchKind::Conditional { target }, if taken { target } else { ip + 2 });
                bits = (bits << 1) | u8::from(taken);
            }
            assert_eq!(self.t.rdmsr(RTIT_TNT_BUFF), Some((1 << n) | u64::from(bits)));
            bits
        }

        /// The packets since the last call, checked against the bytes.
        fn packets(&mut self) -> Vec<Packet> {
            let log = self.t.take_packet_log();
            let bytes = self.t.take_generated_bytes();
            let parsed: Vec<Packet> = parse_all(&bytes, false).expect("parses").into_iter().map(|d| d.packet).collect();
            // The set-up PSB is in the bytes but was taken from the log already.
            let skip = parsed.len() - log.len();
            assert_eq!(parsed[skip..], log[..], "bytes and packet log disagree");
            log
        }
    }

    fn jcc(t: &mut RtitTracer, ip: u64, target: u64, taken: bool) {
        t.branch(ip, ip + 2, BranchKind::Conditional { target }, if taken { target } else { ip + 2 });
    }

    // ---- Normal non-jump operation ----

    #[test]
    fn row_01_non_jump_enabled_before_and_after_sends_nothing() {
        let mut r = Rig::inside();
        r.t.branch(IN, IN + 3, BranchKind::None, IN + 3);
        r.t.linear(IN + 6);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_02_non_jump_disabled_before_and_after_sends_nothing() {
        let mut r = Rig::plain();
        r.t.branch(OUT, OUT + 3, BranchKind::None, OUT + 3);
        r.t.linear(OUT + 6);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_03_non_jump_walking_out_sends_fup_pgd_nlip() {
        let mut r = Rig::inside();
        r.t.branch(L - 3, L, BranchKind::None, L);
        assert_eq!(r.packets(), [fup(Pgd, c32(L))]);
        assert!(!r.t.packet_en() && !r.t.filter_en());
    }

    #[test]
    fn row_04_non_jump_walking_out_with_tnt_sends_tnt_fup_pgd_nlip() {
        let mut r = Rig::inside();
        let bits = r.tnt(2);
        r.t.linear(L);
        assert_eq!(r.packets(), [Tnt { bits, count: 2 }, fup(Pgd, c32(L))]);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    #[test]
    fn row_05_non_jump_walking_in_sends_fup_pge_nlip() {
        let mut r = Rig::plain();
        r.t.branch(B - 3, B, BranchKind::None, B);
        assert_eq!(r.packets(), [fup(Pge, full(B))]);
        assert!(r.t.packet_en());
    }

    // ---- Unconditional direct jump ----

    #[test]
    fn row_06_direct_jump_enabled_before_and_after_sends_nothing() {
        let mut r = Rig::inside();
        r.t.branch(IN, IN + 5, BranchKind::DirectJump { target: IN + 0x80 }, IN + 0x80);
        r.t.branch(IN + 0x80, IN + 0x85, BranchKind::DirectCall { target: IN + 0x200 }, IN + 0x200);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_07_direct_jump_disabled_before_and_after_sends_nothing() {
        let mut r = Rig::plain();
        r.t.branch(OUT, OUT + 5, BranchKind::DirectJump { target: OUT + 0x80 }, OUT + 0x80);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_08_direct_jump_out_of_region_sends_fup_pgd_nlip() {
        let mut r = Rig::inside();
        r.t.branch(IN + 0x10, IN + 0x15, BranchKind::DirectJump { target: OUT }, OUT);
        // NLIP of the JMP, not its target (Table 1, "Near jump out of region").
        assert_eq!(r.packets(), [fup(Pgd, c16(IN + 0x15))]);
    }

    #[test]
    fn row_09_direct_jump_out_with_tnt_sends_tnt_fup_pgd_nlip() {
        let mut r = Rig::inside();
        let bits = r.tnt(3);
        r.t.branch(IN + 0x10, IN + 0x15, BranchKind::DirectJump { target: OUT }, OUT);
        assert_eq!(r.packets(), [Tnt { bits, count: 3 }, fup(Pgd, c16(IN + 0x15))]);
    }

    #[test]
    fn row_10_direct_jump_into_region_sends_fup_pge_blip() {
        let mut r = Rig::plain();
        r.t.branch(OUT, OUT + 5, BranchKind::DirectJump { target: IN + 0x40 }, IN + 0x40);
        assert_eq!(r.packets(), [fup(Pge, full(IN + 0x40))]);
    }

    // ---- Conditional jumps that do not fill the TNT buffer ----

    #[test]
    fn row_11_taken_jcc_not_filling_behaves_like_a_direct_jump() {
        // Enabled before and after: only RTIT_TNT_BUFF changes (row 6).
        let mut r = Rig::inside();
        jcc(&mut r.t, IN, IN + 0x40, true);
        assert_eq!(r.packets(), []);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0b11));
        // Enabled before, not after: the bit, then FUP.PGD with the NLIP (rows 8/9).
        jcc(&mut r.t, IN + 0x40, OUT, true);
        assert_eq!(r.packets(), [Tnt { bits: 0b11, count: 2 }, fup(Pgd, c16(IN + 0x42))]);
        // Not enabled before, enabled after: FUP.PGE with the BLIP (row 10), no TNT bit.
        jcc(&mut r.t, OUT, IN + 0x80, true);
        assert_eq!(r.packets(), [fup(Pge, c16(IN + 0x80))]);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    #[test]
    fn row_12_not_taken_jcc_not_filling_behaves_like_a_non_jump() {
        let mut r = Rig::inside();
        jcc(&mut r.t, IN, OUT, false);
        assert_eq!(r.packets(), []);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0b10));
        // Falling through to the limit: the not-taken bit, then FUP.PGD with the NLIP (rows 3/4).
        jcc(&mut r.t, L - 2, OUT, false);
        assert_eq!(r.packets(), [Tnt { bits: 0b00, count: 2 }, fup(Pgd, c32(L))]);
        // Falling through to the base: FUP.PGE with the NLIP (row 5).
        jcc(&mut r.t, B - 2, OUT, false);
        assert_eq!(r.packets(), [fup(Pge, c32(B))]);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    // ---- Conditional jumps that fill the TNT buffer ----

    #[test]
    fn row_13_taken_jcc_filling_tnt_sends_tnt() {
        let mut r = Rig::inside();
        let bits = r.tnt(5);
        jcc(&mut r.t, IN + 0x600, IN + 0x10, true);
        assert_eq!(r.packets(), [Tnt { bits: (bits << 1) | 1, count: 6 }]);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    #[test]
    fn row_14_impossible_disabled_taken_jcc_does_not_touch_tnt_buffer() {
        let mut r = Rig::plain();
        for k in 0..6 {
            jcc(&mut r.t, OUT + 0x10 * k, OUT + 0x100, true);
        }
        assert_eq!(r.packets(), []);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    #[test]
    fn row_15_taken_jcc_filling_tnt_and_leaving_sends_tnt_fup_pgd_nlip() {
        let mut r = Rig::inside();
        let bits = r.tnt(5);
        jcc(&mut r.t, IN + 0x600, OUT, true);
        assert_eq!(r.packets(), [Tnt { bits: (bits << 1) | 1, count: 6 }, fup(Pgd, c16(IN + 0x602))]);
    }

    /// Five results left in RTIT_TNT_BUFF while PacketEn = 0 (software restored them, §3.3.13).
    fn five_pending_while_disabled() -> (Rig, u8) {
        let mut r = Rig::plain();
        let bits = 0b10110;
        r.t.wrmsr(RTIT_TNT_BUFF, (1 << 5) | bits, OUT, OUT + 2, &mut r.mem).unwrap();
        (r, bits as u8)
    }

    #[test]
    fn row_16_impossible_taken_jcc_entering_does_not_add_its_bit() {
        let (mut r, bits) = five_pending_while_disabled();
        jcc(&mut r.t, OUT, IN + 0x20, true);
        // The jcc started with PacketEn = 0: its bit is not recorded; FUP.PGE forces out the five.
        assert_eq!(r.packets(), [Tnt { bits, count: 5 }, fup(Pge, full(IN + 0x20))]);
    }

    #[test]
    fn row_17_not_taken_jcc_filling_tnt_sends_tnt() {
        let mut r = Rig::inside();
        let bits = r.tnt(5);
        jcc(&mut r.t, IN + 0x600, OUT, false);
        assert_eq!(r.packets(), [Tnt { bits: bits << 1, count: 6 }]);
    }

    #[test]
    fn row_18_impossible_disabled_not_taken_jcc_does_not_touch_tnt_buffer() {
        let (mut r, _) = five_pending_while_disabled();
        jcc(&mut r.t, OUT, OUT + 0x100, false);
        assert_eq!(r.packets(), []);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some((1 << 5) | 0b10110));
    }

    #[test]
    fn row_19_not_taken_jcc_filling_tnt_and_walking_out_sends_tnt_fup_pgd_nlip() {
        let mut r = Rig::inside();
        let bits = r.tnt(5);
        jcc(&mut r.t, L - 2, OUT, false);
        assert_eq!(r.packets(), [Tnt { bits: bits << 1, count: 6 }, fup(Pgd, c32(L))]);
    }

    #[test]
    fn row_20_impossible_not_taken_jcc_walking_in_does_not_add_its_bit() {
        let (mut r, bits) = five_pending_while_disabled();
        jcc(&mut r.t, B - 2, OUT, false);
        assert_eq!(r.packets(), [Tnt { bits, count: 5 }, fup(Pge, full(B))]);
    }

    // ---- Near indirect jump (RET, CALL/JMP indirect) ----

    #[test]
    fn row_21_indirect_jump_enabled_sends_tip_blip() {
        let mut r = Rig::inside();
        r.t.branch(IN, IN + 2, BranchKind::IndirectJump, IN + 0x300);
        r.t.branch(IN + 0x300, IN + 0x302, BranchKind::IndirectCall, IN + 0x500);
        r.t.branch(IN + 0x500, IN + 0x501, BranchKind::Return, IN + 0x302);
        assert_eq!(r.packets(), [Tip(c16(IN + 0x300)), Tip(c16(IN + 0x500)), Tip(c16(IN + 0x302))]);
    }

    #[test]
    fn row_22_indirect_jump_with_tnt_sends_tnt_tip() {
        let mut r = Rig::inside();
        let bits = r.tnt(4);
        r.t.branch(IN, IN + 2, BranchKind::IndirectJump, IN + 0x300);
        assert_eq!(r.packets(), [Tnt { bits, count: 4 }, Tip(c16(IN + 0x300))]);
    }

    #[test]
    fn row_23_indirect_jump_disabled_sends_nothing() {
        let mut r = Rig::plain();
        r.t.branch(OUT, OUT + 2, BranchKind::IndirectJump, OUT + 0x300);
        r.t.branch(OUT + 0x300, OUT + 0x301, BranchKind::Return, OUT + 0x10);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_24_indirect_jump_leaving_sends_tip_blip_then_fup_pgd_nlip() {
        let mut r = Rig::inside();
        r.t.branch(IN + 0x20, IN + 0x22, BranchKind::IndirectJump, OUT);
        assert_eq!(r.packets(), [Tip(c32(OUT)), fup(Pgd, c32(IN + 0x22))]);
    }

    #[test]
    fn row_25_indirect_jump_leaving_with_tnt_sends_tnt_tip_fup_pgd() {
        let mut r = Rig::inside();
        let bits = r.tnt(1);
        r.t.branch(IN + 0x20, IN + 0x21, BranchKind::Return, OUT);
        assert_eq!(r.packets(), [Tnt { bits, count: 1 }, Tip(c32(OUT)), fup(Pgd, c32(IN + 0x21))]);
    }

    #[test]
    fn row_26_indirect_jump_entering_sends_just_fup_pge_blip() {
        let mut r = Rig::plain();
        r.t.branch(OUT, OUT + 2, BranchKind::IndirectCall, IN + 0x44);
        assert_eq!(r.packets(), [fup(Pge, full(IN + 0x44))]);
        // A CALL that started with PacketEn = 0 does not set RTIT_LAST_CALL_NLIP (§4.3.2).
        assert_eq!(r.t.rdmsr(RTIT_LAST_CALL_NLIP), Some(0));
    }

    // ---- Far transfers ----

    #[test]
    fn row_27_far_transfer_enabled_sends_fup_far_nlip_and_tip_blip() {
        let mut r = Rig::inside();
        r.t.far_transfer(IN + 0x10, IN + 0x17, FarKind::FarJmp, IN + 0x80, USER);
        assert_eq!(r.packets(), [fup(Far, c16(IN + 0x17)), Tip(c16(IN + 0x80))]);
    }

    #[test]
    fn row_27_interrupt_reports_the_resume_ip_and_a_fault_its_clip() {
        let mut r = Rig::new(|c| {
            c.set_os(true);
        }, None);
        // Filter on everything so the handler is traced too.
        r.t.wrmsr(RTIT_EVENTS, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff).0, OUT, OUT + 2, &mut r.mem).unwrap();
        assert_eq!(r.packets(), [fup(Pge, full(OUT + 2))]);
        r.t.async_event(AsyncKind::Interrupt { resume_ip: OUT + 0x20 }, KERNEL_ENTRY, KERNEL);
        r.t.far_transfer(KERNEL_ENTRY + 0x40, KERNEL_ENTRY + 0x42, FarKind::Iret, OUT + 0x20, USER);
        r.t.async_event(AsyncKind::Fault { ip: OUT + 0x20 }, KERNEL_ENTRY + 0x100, KERNEL);
        assert_eq!(
            r.packets(),
            [
                fup(Far, c16(OUT + 0x20)),
                Tip(full(KERNEL_ENTRY)),
                fup(Far, c16(KERNEL_ENTRY + 0x42)),
                Tip(full(OUT + 0x20)),
                fup(Far, c16(OUT + 0x20)),
                Tip(full(KERNEL_ENTRY + 0x100)),
            ]
        );
    }

    #[test]
    fn row_28_far_transfer_with_tnt_sends_tnt_fup_far_tip() {
        let mut r = Rig::inside();
        let bits = r.tnt(6 - 1);
        r.t.far_transfer(IN + 0x10, IN + 0x17, FarKind::FarCall, IN + 0x80, USER);
        assert_eq!(r.packets(), [Tnt { bits, count: 5 }, fup(Far, c16(IN + 0x17)), Tip(c16(IN + 0x80))]);
    }

    #[test]
    fn row_29_far_transfer_disabled_sends_nothing() {
        let mut r = Rig::plain();
        r.t.far_transfer(OUT, OUT + 7, FarKind::FarJmp, OUT + 0x80, USER);
        r.t.far_transfer(OUT + 0x80, OUT + 0x82, FarKind::Syscall, KERNEL_ENTRY, KERNEL);
        assert_eq!(r.packets(), []);
    }

    #[test]
    fn row_30_far_transfer_leaving_filter_sends_fup_pgd_nlip_and_tip_blip() {
        let mut r = Rig::inside();
        r.t.far_transfer(IN + 0x10, IN + 0x17, FarKind::FarJmp, OUT, USER);
        assert_eq!(r.packets(), [fup(Pgd, c16(IN + 0x17)), Tip(c32(OUT))]);
        assert!(r.t.context_en());
    }

    #[test]
    fn row_31_far_transfer_leaving_filter_with_tnt_sends_tnt_fup_pgd_tip() {
        let mut r = Rig::inside();
        let bits = r.tnt(2);
        r.t.far_transfer(IN + 0x10, IN + 0x17, FarKind::FarRet, OUT, USER);
        assert_eq!(r.packets(), [Tnt { bits, count: 2 }, fup(Pgd, c16(IN + 0x17)), Tip(c32(OUT))]);
    }

    #[test]
    fn row_32_far_transfer_clearing_context_en_sends_fup_pgd_only() {
        let mut r = Rig::inside();
        r.t.far_transfer(IN + 0x10, IN + 0x12, FarKind::Syscall, KERNEL_ENTRY, KERNEL);
        assert_eq!(r.packets(), [fup(Pgd, c16(IN + 0x12))]);
        assert!(!r.t.context_en());
    }

    #[test]
    fn row_33_far_transfer_clearing_context_en_with_tnt_sends_tnt_fup_pgd() {
        let mut r = Rig::inside();
        let bits = r.tnt(3);
        // A page fault at IN + 0x30: the CLIP (Table 19 footnote 2).
        r.t.async_event(AsyncKind::Fault { ip: IN + 0x30 }, KERNEL_ENTRY, KERNEL);
        assert_eq!(r.packets(), [Tnt { bits, count: 3 }, fup(Pgd, c16(IN + 0x30))]);
    }

    #[test]
    fn row_34_far_transfer_from_context_en_0_sends_just_fup_pge_blip() {
        let mut r = Rig::inside();
        r.t.far_transfer(IN + 0x10, IN + 0x12, FarKind::Syscall, KERNEL_ENTRY, KERNEL);
        r.packets();
        r.t.branch(KERNEL_ENTRY, KERNEL_ENTRY + 2, BranchKind::IndirectJump, KERNEL_ENTRY + 0x40);
        r.t.far_transfer(KERNEL_ENTRY + 0x40, KERNEL_ENTRY + 0x43, FarKind::Sysret, IN + 0x12, USER);
        assert_eq!(r.packets(), [fup(Pge, c16(IN + 0x12))]);
    }

    #[test]
    fn row_35_far_transfer_from_filter_en_0_sends_just_fup_pge_blip() {
        let mut r = Rig::plain();
        assert!(r.t.context_en());
        r.t.far_transfer(OUT, OUT + 7, FarKind::FarJmp, IN + 0x90, USER);
        assert_eq!(r.packets(), [fup(Pge, full(IN + 0x90))]);
    }

    // ---- SMI / VM exit, RSM / VM entry ----

    #[test]
    fn row_36_smi_and_vm_exit_send_fup_pgd_with_the_saved_ip() {
        let mut r = Rig::inside();
        r.t.smi(IN + 0x50, 0x3_8000);
        assert_eq!(r.packets(), [fup(Pgd, c16(IN + 0x50))]);
        assert!(!r.t.context_en());
        r.t.rsm(0x3_8100, 0x3_8102, IN + 0x50, USER);
        r.packets();
        r.t.vm_exit(IN + 0x60, 0xFFFF_FFFF_A000_0000);
        assert_eq!(r.packets(), [fup(Pgd, c16(IN + 0x60))]);
    }

    #[test]
    fn row_37_smi_with_tnt_sends_tnt_fup_pgd() {
        let mut r = Rig::inside();
        let bits = r.tnt(4);
        r.t.smi(IN + 0x50, 0x3_8000);
        assert_eq!(r.packets(), [Tnt { bits, count: 4 }, fup(Pgd, c16(IN + 0x50))]);
    }

    #[test]
    fn row_38_rsm_and_vm_entry_send_fup_pge_blip() {
        let mut r = Rig::inside();
        r.t.smi(IN + 0x50, 0x3_8000);
        r.packets();
        r.t.rsm(0x3_8100, 0x3_8102, IN + 0x50, USER);
        assert_eq!(r.packets(), [fup(Pge, c16(IN + 0x50))]);
        r.t.vm_exit(IN + 0x60, 0xFFFF_FFFF_A000_0000);
        r.packets();
        r.t.vm_entry(0xFFFF_FFFF_A000_0100, 0xFFFF_FFFF_A000_0103, IN + 0x70, USER);
        assert_eq!(r.packets(), [fup(Pge, c16(IN + 0x70))]);
    }

    // ---- MOV to CR3 ----

    const NEW_CR3: u64 = 0x2_3456_7000;

    fn sts_on_cr3(c: &mut RtitCtl) {
        c.set_sts_en(true).set_sts_on_cr3(true);
    }

    fn sts(tsc: u64) -> Packet {
        Sts { acbr: 24, ecbr: 24, tsc }
    }

    #[test]
    fn row_39_mov_cr3_enabled_sends_pip_and_sts() {
        let mut r = Rig::new(sts_on_cr3, None);
        r.enter();
        r.t.set_tsc(0x1_2345);
        r.t.mov_cr3(IN + 3, NEW_CR3);
        assert_eq!(r.packets(), [Pip { cr3: NEW_CR3, pg: true }, sts(0x1_2345)]);
    }

    #[test]
    fn row_40_mov_cr3_enabled_with_tnt_sends_tnt_pip_sts() {
        let mut r = Rig::new(sts_on_cr3, None);
        r.enter();
        let bits = r.tnt(2);
        r.t.mov_cr3(IN + 3, NEW_CR3);
        assert_eq!(r.packets(), [Tnt { bits, count: 2 }, Pip { cr3: NEW_CR3, pg: true }, sts(0)]);
    }

    #[test]
    fn row_41_mov_cr3_disabled_sends_pip_and_sts_in_the_current_mode() {
        // ContextEn = 1 and TriggerEn = 1 outside the filter region: PIP and STS (Less_Pkts = 0).
        let mut r = Rig::new(sts_on_cr3, None);
        r.t.mov_cr3(OUT + 3, NEW_CR3);
        assert_eq!(r.packets(), [Pip { cr3: NEW_CR3, pg: true }, sts(0)]);
        // With Less_Pkts, STS needs PacketEn; PIP only needs ContextEn and TriggerEn.
        let mut r = Rig::new(|c| {
            sts_on_cr3(c);
            c.set_less_pkts(true);
        }, None);
        r.t.mov_cr3(OUT + 3, NEW_CR3);
        assert_eq!(r.packets(), [Pip { cr3: NEW_CR3, pg: true }]);
    }

    #[test]
    fn row_42_mov_cr3_enabling_sends_sts_and_fup_pge_nlip() {
        // CR3 filtering: PacketEn rises because CR3 now matches; no PIP with CR3En = 1.
        let mut r = Rig::new(|c| {
            sts_on_cr3(c);
            c.set_cr3_en(true);
        }, Some(USER.cr3));
        r.enter();
        r.t.mov_cr3(IN + 3, NEW_CR3);
        r.packets();
        r.t.mov_cr3(IN + 0x23, USER.cr3);
        assert_eq!(r.packets(), [sts(0), fup(Pge, c16(IN + 0x23))]);
        // Without CR3 filtering: a MOV CR3 whose NLIP is the range base sends PIP, STS, FUP.PGE.
        let mut r = Rig::new(sts_on_cr3, None);
        r.t.mov_cr3(B, NEW_CR3);
        assert_eq!(r.packets(), [Pip { cr3: NEW_CR3, pg: true }, sts(0), fup(Pge, full(B))]);
    }

    #[test]
    fn row_43_mov_cr3_disabling_sends_sts_and_fup_pgd_nlip() {
        let mut r = Rig::new(|c| {
            sts_on_cr3(c);
            c.set_cr3_en(true);
        }, Some(USER.cr3));
        r.enter();
        r.t.mov_cr3(IN + 3, NEW_CR3);
        assert_eq!(r.packets(), [sts(0), fup(Pgd, c16(IN + 3))]);
        // Without CR3 filtering, walking out at the limit: PIP, STS, FUP.PGD.
        let mut r = Rig::new(sts_on_cr3, None);
        r.enter();
        r.t.mov_cr3(L, NEW_CR3);
        assert_eq!(r.packets(), [Pip { cr3: NEW_CR3, pg: true }, sts(0), fup(Pgd, c32(L))]);
    }

    #[test]
    fn row_44_mov_cr3_disabling_with_tnt_sends_tnt_first() {
        let mut r = Rig::new(sts_on_cr3, None);
        r.enter();
        let bits = r.tnt(3);
        r.t.mov_cr3(L, NEW_CR3);
        assert_eq!(r.packets(), [Tnt { bits, count: 3 }, Pip { cr3: NEW_CR3, pg: true }, sts(0), fup(Pgd, c32(L))]);
        // With CR3 filtering (no PIP) the TNT still goes first (footnote 1).
        let mut r = Rig::new(|c| {
            sts_on_cr3(c);
            c.set_cr3_en(true);
        }, Some(USER.cr3));
        r.enter();
        let bits = r.tnt(2);
        r.t.mov_cr3(IN + 3, NEW_CR3);
        assert_eq!(r.packets(), [Tnt { bits, count: 2 }, sts(0), fup(Pgd, c16(IN + 3))]);
    }

    #[test]
    fn footnote_3_each_tnt_fup_tip_carries_a_cycle_count_and_the_second_is_zero() {
        let mut r = Rig::new(|c| {
            c.set_cycle_acc(true);
        }, None);
        r.t.set_tsc(100);
        r.t.branch(OUT, OUT + 5, BranchKind::DirectJump { target: IN }, IN);
        r.t.set_tsc(150);
        r.t.far_transfer(IN + 0x10, IN + 0x17, FarKind::FarJmp, IN + 0x80, USER);
        let log = r.t.take_packet_log();
        // Cycles count only while PacketEn (Less_Pkts = 0): nothing before the FUP.PGE.
        assert_eq!(
            log,
            [
                fup(Pge, full(IN)),
                Cyc { cycles: 0 },
                fup(Far, c16(IN + 0x17)),
                Cyc { cycles: 50 },
                Tip(c16(IN + 0x80)),
                Cyc { cycles: 0 },
            ]
        );
        let bytes = r.t.take_generated_bytes();
        let parsed: Vec<Packet> = parse_all(&bytes, true).unwrap().into_iter().map(|d| d.packet).skip(1).collect();
        assert_eq!(parsed, log);
    }
}
