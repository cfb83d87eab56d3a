//! RTIT packet rules outside Table 19 (RTIT Programming Reference v1.05): RET compression
//! (§4.2.3.2, Figures 6/7), Pkt_Mask PSBs (§3.3.9), TraceStop and RTIT_CTL.Dest (§4.2.11,
//! §3.3.2), Table 17 gating with Less_Pkts, MTC/STS/cycle counts (§4.2.12-§4.2.15), buffer
//! overflow (§4.2.5), event IDs (Table 7) and the reproducible errata (Appendix E).

mod common;

/// Every test sits in `rtit` so `cargo test rtit` selects them.
mod rtit {
    use super::common::*;
    use pttrace_core::guest_mem::SparseMemory;
    use pttrace_core::insn_class::{BranchKind, FarKind};
    use pttrace_core::pt::packet::ExecMode;
    use pttrace_core::pt::tracer::Context;
    use pttrace_core::rtit::decode::{instructions, reconstruct, FlowEvent, FlowOptions};
    use pttrace_core::rtit::errata::Errata;
    use pttrace_core::rtit::msr::*;
    use pttrace_core::rtit::packet::{FupKind, Lip, Packet};
    use pttrace_core::rtit::{RtitOptions, RtitTracer};

    use FupKind::*;
    use Packet::*;

    const USER: Context = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };
    const SETUP: u64 = 0x9000;


    struct Rig {
        t: RtitTracer,
        mem: SparseMemory,
    }

    impl Rig {
        /// User tracing with `events`, the region at 1 MiB (64 KiB), enabled from SETUP.
        fn with(opts: RtitOptions, events: RtitEvents, extra: impl FnOnce(&mut RtitCtl)) -> Rig {
            let mut mem = SparseMemory::new();
            mem.add_ram(0x10_0000, 0x1_0000);
            let t = RtitTracer::new(opts, USER).with_packet_log();
            t.rdmsr(RTIT_CTL).unwrap();
            let mut r = Rig { t, mem };
            r.w(RTIT_BASE_ADDR, 0x10_0000);
            r.w(RTIT_LIMIT_MASK, 0xFFFF);
            r.w(RTIT_EVENTS, events.0);
            let mut ctl = RtitCtl(0);
            ctl.set_user(true).set_trace_en(true);
            extra(&mut ctl);
            r.w(RTIT_CTL, ctl.0);
            ctl.set_trace_active(true);
            r.w(RTIT_CTL, ctl.0);
            r
        }

        fn all(extra: impl FnOnce(&mut RtitCtl)) -> Rig {
            Rig::with(RtitOptions::default(), RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff), extra)
        }

        fn w(&mut self, msr: u32, v: u64) {
            self.t.wrmsr(msr, v, SETUP, SETUP + 2, &mut self.mem).unwrap();
        }

        fn log(&mut self) -> Vec<Packet> {
            self.t.take_packet_log()
        }

        fn ctl(&self) -> RtitCtl {
            RtitCtl(self.t.rdmsr(RTIT_CTL).unwrap())
        }
    }

    // ---- RET compression (§4.2.3.2) ----

    #[test]
    fn figure_7_only_the_innermost_ret_is_compressed() {
        let mut r = Rig::all(|c| {
            c.set_cmprs_ret(true);
        });
        assert_eq!(r.log(), [Psb, fup(Pge, z16(SETUP + 2))]);
        // CALL at 0x005 (NLIP 0x00A) -> 0x400; CALL at 0x405 (NLIP 0x409) -> 0x500; RET at 0x502 ->
        // 0x409 matches: Taken; RET at 0x40C -> 0x00A does not: TIP.
        r.t.branch(0x005, 0x00A, BranchKind::DirectCall { target: 0x400 }, 0x400);
        r.t.branch(0x405, 0x409, BranchKind::DirectCall { target: 0x500 }, 0x500);
        r.t.branch(0x502, 0x503, BranchKind::Return, 0x409);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0b11));
        // The compressed RET did not update RTIT_LAST_LIP (still LIP[47:16] of SETUP+2).
        assert_eq!(r.t.rdmsr(RTIT_LAST_LIP), Some(1 << 32));
        r.t.branch(0x40C, 0x40D, BranchKind::Return, 0x00A);
        assert_eq!(r.log(), [Tnt { bits: 1, count: 1 }, Tip(z16(0x00A))]);
        assert_eq!(r.t.stats().compressed_rets, 1);
    }

    #[test]
    fn without_cmprs_ret_and_after_far_calls_rets_send_tips() {
        let mut r = Rig::all(|_| {});
        r.log();
        r.t.branch(0x005, 0x00A, BranchKind::DirectCall { target: 0x400 }, 0x400);
        r.t.branch(0x400, 0x401, BranchKind::Return, 0x00A);
        assert_eq!(r.log(), [Tip(z16(0x00A))]);
        assert_eq!(r.t.rdmsr(RTIT_LAST_CALL_NLIP), Some(0));
        let mut r = Rig::all(|c| {
            c.set_cmprs_ret(true);
        });
        r.log();
        // "Far calls will also not modify RTIT_LAST_CALL_NLIP."
        r.t.far_transfer(0x005, 0x00C, FarKind::FarCall, 0x400, USER);
        r.t.branch(0x400, 0x401, BranchKind::Return, 0x00C);
        assert_eq!(
            r.log(),
            [fup(Far, z16(0x00C)), Tip(z16(0x400)), Tip(z16(0x00C))]
        );
    }

    // ---- PSB and Pkt_Mask (§3.3.9) ----

    #[test]
    fn section_3_3_9_example_fup_far_psb_tip_and_pkt_cnt_0xe() {
        let mut r = Rig::all(|_| {});
        r.log();
        // Pkt_Cnt = 0xFFC, Pkt_Mask = 1 (bit 12).
        r.w(RTIT_PKT_CNT, (1 << 16) | 0xFFC);
        // A far transfer from a 48-bit address (FUP.FAR, no compression: 7 bytes) to one with
        // LIP[47:32] = 0 (TIP with zero extension: 5 bytes).
        r.t.far_transfer(0x7F00_0000_1000, 0x7F00_0000_1007, FarKind::FarJmp, 0x12_3456, USER);
        assert_eq!(
            r.log(),
            [fup(Far, Lip::full(0x7F00_0000_1007)), Psb, Tip(z32(0x12_3456))]
        );
        assert_eq!(r.t.rdmsr(RTIT_PKT_CNT), Some((1 << 16) | 0xE));
    }

    #[test]
    fn psb_only_when_trigger_en_rises() {
        let mut r = Rig::all(|_| {});
        assert_eq!(r.log(), [Psb, fup(Pge, z16(SETUP + 2))]);
        let ctl = r.ctl();
        r.w(RTIT_CTL, ctl.0);
        assert_eq!(r.log(), []);
        r.w(RTIT_CTL, ctl.0 & !(1 << 13));
        assert_eq!(r.log(), [], "no FUP.PGD when TriggerEn drops (§4.2.8)");
        r.w(RTIT_CTL, ctl.0);
        assert_eq!(r.log(), [Psb, fup(Pge, z16(SETUP + 2))]);
    }

    #[test]
    fn psb_mtc_and_trace_stop_do_not_flush_the_partial_tnt() {
        let mut r = Rig::all(|c| {
            c.set_mtc_en(true);
        });
        r.log();
        r.t.branch(0x100, 0x102, BranchKind::Conditional { target: 0x200 }, 0x200);
        r.t.set_tsc(1 << 7);
        r.w(RTIT_PKT_CNT, 0x800);
        assert_eq!(r.log(), [Mtc { range: 0, tsc: 1 }, Psb]);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0b11));
    }

    // ---- TraceStop (§4.2.11) and Dest (§3.3.2) ----

    fn stop_rig(dest: bool) -> Rig {
        let mut r = Rig::all(|c| {
            c.set_dest(dest);
        });
        r.w(RTIT_LIP1, 0x5000);
        r.w(RTIT_LIP3, 0x6000);
        r.w(RTIT_EVENTS, RtitEvents::new(EventId::AlwaysOn, EventId::Range1).0);
        r.log();
        r
    }

    #[test]
    fn trace_stop_clears_trace_active_and_sends_no_fup_pgd() {
        let mut r = stop_rig(true);
        r.t.branch(0x100, 0x102, BranchKind::Conditional { target: 0x300 }, 0x300);
        // Walking onto the stop range base.
        r.t.linear(0x5000);
        assert_eq!(r.log(), [TraceStop]);
        assert!(!r.ctl().trace_active() && !r.t.trigger_en());
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0b11));
        r.t.branch(0x5000, 0x5002, BranchKind::IndirectJump, 0x100);
        assert_eq!(r.log(), []);
    }

    #[test]
    fn dest_0_writes_the_trace_stop_byte_at_offset_c0() {
        for dest in [false, true] {
            let mut r = stop_rig(dest);
            let before = r.t.rdmsr(RTIT_OFFSET).unwrap();
            r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x5010);
            assert_eq!(r.log(), [Tip(z16(0x5010)), TraceStop]);
            let ctl = r.ctl();
            r.w(RTIT_CTL, ctl.0);
            // TIP (3 bytes) then TraceStop.
            let stop_addr = if dest { 0x10_0000 + before + 3 } else { (0x10_0000 + before + 3) & !0xFF | 0xC0 };
            assert_eq!(r.mem.bytes(stop_addr, 1), [0xC1], "dest {dest}");
            assert_eq!(r.t.rdmsr(RTIT_OFFSET), Some(before + 4));
        }
    }

    // ---- Event IDs (Table 7) ----

    #[test]
    fn range0_or_range1_filters_on_either_range_and_reserved_ids_signal_nothing() {
        let mut r = Rig::with(RtitOptions::default(), RtitEvents::new(EventId::Range0Or1, EventId::AlwaysOff), |_| {});
        r.w(RTIT_LIP0, 0x1000);
        r.w(RTIT_LIP2, 0x2000);
        r.w(RTIT_LIP1, 0x8000);
        r.w(RTIT_LIP3, 0x9000);
        assert_eq!(r.log(), [Psb]);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x1800);
        r.t.branch(0x1800, 0x1802, BranchKind::IndirectJump, 0x8800);
        r.t.branch(0x8800, 0x8802, BranchKind::IndirectJump, 0x4000);
        assert_eq!(
            r.log(),
            [fup(Pge, z16(0x1800)), Tip(z16(0x8800)), Tip(z16(0x4000)), fup(Pgd, z16(0x8802))]
        );
        // A reserved filter event ID (011b) leaves FilterEn as it is.
        r.w(RTIT_EVENTS, 0b011);
        r.w(RTIT_STATUS, 1);
        assert_eq!(r.log(), [fup(Pge, z16(SETUP + 2))]);
        r.t.branch(0x4000, 0x4002, BranchKind::IndirectJump, 0x1_0000);
        assert!(r.t.filter_en());
    }

    // ---- Table 17 gating, MTC, STS, cycle counts ----

    #[test]
    fn table_17_mtc_and_sts_follow_less_pkts() {
        for less in [false, true] {
            let mut r = Rig::with(RtitOptions::default(), RtitEvents::new(EventId::AlwaysOff, EventId::AlwaysOff), |c| {
                c.set_mtc_en(true).set_sts_en(true).set_less_pkts(less).set_mtc_range(1);
            });
            r.log();
            // PacketEn = 0 (filter Always off), TriggerEn = 1.
            r.t.set_tsc(3 << 9);
            r.t.frequency_change(20, 18);
            let expect = if less { vec![] } else { vec![Mtc { range: 1, tsc: 3 }, Sts { acbr: 20, ecbr: 18, tsc: 3 << 9 }] };
            assert_eq!(r.log(), expect, "less_pkts {less}");
            // TSC[16:9] unchanged: no MTC.
            r.t.set_tsc((3 << 9) + 0x1FF);
            r.t.wakeup();
            let expect = if less { vec![] } else { vec![Sts { acbr: 20, ecbr: 18, tsc: (3 << 9) + 0x1FF }] };
            assert_eq!(r.log(), expect);
        }
    }

    #[test]
    fn cycle_accurate_mtc_sts_and_periodic_cycle_count() {
        let mut r = Rig::all(|c| {
            c.set_cycle_acc(true).set_mtc_en(true);
        });
        assert_eq!(r.log(), [Psb, fup(Pge, z16(SETUP + 2)), Cyc { cycles: 0 }]);
        r.t.set_tsc(0x80);
        assert_eq!(r.log(), [Mtc { range: 0, tsc: 1 }, Cyc { cycles: 0x80 }]);
        // RTIT_CNTP[21] set: FUP.PCC with the NLIP at the next instruction boundary.
        r.t.set_tsc(0x80 + (1 << 21));
        r.log();
        r.t.branch(0x100, 0x103, BranchKind::None, 0x103);
        // The FUP.PCC's own cycle count carries and clears RTIT_CNTP.
        assert_eq!(r.log(), [fup(Pcc, z16(0x103)), Cyc { cycles: 1 << 21 }]);
        assert_eq!(r.t.rdmsr(RTIT_CNTP), Some(0));
        // Partial TNT carries no cycle count; the full one does.
        for k in 0..6 {
            r.t.branch(0x200 + 2 * k, 0x202 + 2 * k, BranchKind::Conditional { target: 0 }, 0x202 + 2 * k);
        }
        assert_eq!(r.log(), [Tnt { bits: 0, count: 6 }, Cyc { cycles: 0 }]);
    }

    // ---- Buffer overflow (§4.2.5) ----

    #[test]
    fn overflow_drops_packets_keeps_the_tnt_and_resyncs_with_fup_buffovf() {
        let opts = RtitOptions { internal_buffer: Some(12), ..RtitOptions::default() };
        let mut r = Rig::with(opts, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff), |c| {
            c.set_cmprs_ret(true);
        });
        r.log();
        r.t.branch(0x100, 0x105, BranchKind::DirectCall { target: 0x7F00_0000_0000 }, 0x7F00_0000_0000);
        r.t.branch(0x7F00_0000_0000, 0x7F00_0000_0002, BranchKind::Conditional { target: 0x7F00_0000_0010 }, 0x7F00_0000_0010);
        // TNT (1) + TIP (7) + TIP (3) fit in 12 bytes, the third TIP does not: overflow.
        r.t.branch(0x7F00_0000_0010, 0x7F00_0000_0012, BranchKind::IndirectJump, 0x7F00_0000_0100);
        r.t.branch(0x7F00_0000_0100, 0x7F00_0000_0102, BranchKind::IndirectJump, 0x7F00_0000_0200);
        r.t.branch(0x7F00_0000_0200, 0x7F00_0000_0202, BranchKind::IndirectJump, 0x300);
        assert!(r.t.overflow());
        assert_eq!(
            r.log(),
            [Tnt { bits: 1, count: 1 }, Tip(Lip::full(0x7F00_0000_0100)), Tip(Lip { cnt: 0, zext: false, payload: 0x0200 })]
        );
        // During the overflow: no TNT updates, no packets.
        r.t.branch(0x300, 0x302, BranchKind::Conditional { target: 0x400 }, 0x400);
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(1));
        // Software reads the buffer out (a drain does not clear the overflow).
        let mut mem = std::mem::take(&mut r.mem);
        r.t.drain(&mut mem);
        assert!(r.t.overflow());
        // The next instruction clears it: FUP.BuffOvf with where execution continues, uncompressed
        // against a cleared RTIT_LAST_LIP, which it does not update; RTIT_LAST_CALL_NLIP cleared.
        r.t.branch(0x400, 0x402, BranchKind::IndirectJump, 0x7F00_0000_0500);
        assert_eq!(r.log(), [fup(BuffOvf, Lip::full(0x7F00_0000_0500))]);
        assert!(!r.t.overflow());
        assert_eq!((r.t.rdmsr(RTIT_LAST_LIP), r.t.rdmsr(RTIT_LAST_CALL_NLIP)), (Some(0), Some(0)));
        r.t.drain(&mut mem);
        r.t.branch(0x7F00_0000_0500, 0x7F00_0000_0502, BranchKind::IndirectJump, 0x7F00_0000_0600);
        assert_eq!(r.log(), [Tip(Lip::full(0x7F00_0000_0600))]);
    }

    #[test]
    fn partial_drains_store_the_oldest_bytes_and_the_overflow_clears_once_the_buffer_is_empty() {
        let opts = RtitOptions { internal_buffer: Some(12), ..RtitOptions::default() };
        let mut r = Rig::with(opts, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff), |_| {});
        let mut mem = std::mem::take(&mut r.mem);
        r.t.drain(&mut mem);
        let start = r.t.rdmsr(RTIT_OFFSET).unwrap();
        r.log();
        r.t.take_generated_bytes();
        for k in 0..6u64 {
            r.t.branch(0x100 + 0x100 * k, 0x102 + 0x100 * k, BranchKind::IndirectJump, 0x200 + 0x100 * k);
        }
        assert!(r.t.overflow());
        assert_eq!(r.log().len(), 4, "four 3-byte TIPs fit in 12 bytes");
        let generated = r.t.take_generated_bytes();
        let pending = r.t.pending_bytes().len();
        assert_eq!(pending, generated.len());
        // A drain of 4 bytes stores the 4 oldest ones at RTIT_OFFSET and advances it by 4.
        assert_eq!(r.t.drain_up_to(&mut mem, 4), 4);
        assert_eq!(r.t.rdmsr(RTIT_OFFSET), Some(start + 4));
        assert_eq!(mem.bytes(0x10_0000 + start, 4), generated[..4].to_vec());
        // Bytes are still waiting: the overflow holds at the next instruction.
        r.t.branch(0x900, 0x902, BranchKind::IndirectJump, 0xA00);
        assert!(r.t.overflow());
        assert_eq!(r.log(), []);
        // The rest drains; the next instruction clears the overflow with FUP.BuffOvf.
        assert_eq!(r.t.drain_up_to(&mut mem, 1000), pending - 4);
        assert_eq!(mem.bytes(0x10_0000 + start, pending), generated);
        r.t.branch(0xA00, 0xA02, BranchKind::IndirectJump, 0xB00);
        assert!(!r.t.overflow());
        assert!(matches!(r.log()[..], [Packet::Fup { kind: FupKind::BuffOvf, .. }]), "FUP.BuffOvf");
    }

    #[test]
    fn a_full_tnt_that_overflows_goes_out_before_fup_buffovf_and_a_pending_stop_after() {
        let opts = RtitOptions { internal_buffer: Some(6), ..RtitOptions::default() };
        let mut r = Rig::with(opts, RtitEvents::new(EventId::AlwaysOn, EventId::Range0), |_| {});
        r.w(RTIT_LIP0, 0x8000);
        r.w(RTIT_LIP2, 0x9000);
        let mut mem = std::mem::take(&mut r.mem);
        r.t.drain(&mut mem);
        r.log();
        // Two 3-byte TIPs fill the 6-byte internal buffer.
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x300);
        assert_eq!(r.t.pending_bytes().len(), 6);
        // Six conditional branches: the full TNT does not fit, starts the overflow and is kept.
        for k in 0..6 {
            r.t.branch(0x300 + 2 * k, 0x302 + 2 * k, BranchKind::Conditional { target: 0x400 }, 0x400);
            r.t.branch(0x400, 0x405, BranchKind::DirectJump { target: 0x302 + 2 * k }, 0x302 + 2 * k);
        }
        assert!(r.t.overflow());
        assert_eq!(r.t.rdmsr(RTIT_TNT_BUFF), Some(0x7F));
        r.t.branch(0x500, 0x502, BranchKind::IndirectJump, 0x600);
        // A TraceStop during the overflow is held (§4.2.5).
        r.t.branch(0x600, 0x602, BranchKind::IndirectJump, 0x8100);
        assert!(r.ctl().trace_active());
        assert_eq!(r.log(), [Tip(z16(0x200)), Tip(z16(0x300))]);
        r.t.drain(&mut mem);
        r.t.branch(0x8100, 0x8102, BranchKind::IndirectJump, 0x8200);
        assert_eq!(r.log(), [Tnt { bits: 0x3F, count: 6 }, fup(BuffOvf, z16(0x8200)), TraceStop]);
        assert!(!r.ctl().trace_active());
    }

    #[test]
    fn overflow_set_by_software_behaves_like_a_full_buffer() {
        let mut r = Rig::all(|_| {});
        r.log();
        // Set and cleared by software before any other instruction: no FUP.BuffOvf (not a natural
        // clearing, §4.2.5).
        r.w(RTIT_STATUS, 0b1001);
        r.w(RTIT_STATUS, 0b0001);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        assert_eq!(r.log(), [Tip(z16(0x200))]);
        // Set with undrained bytes: packets are dropped until a drain empties the buffer; then the
        // next instruction clears it naturally.
        r.w(RTIT_STATUS, 0b1001);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x300);
        assert_eq!(r.log(), []);
        let mut mem = std::mem::take(&mut r.mem);
        r.t.drain(&mut mem);
        r.t.branch(0x300, 0x302, BranchKind::IndirectJump, 0x400);
        assert_eq!(r.log(), [fup(BuffOvf, z16(0x400))]);
    }

    // ---- Errata (Appendix E) ----

    fn errata_rig(errata: Errata, extra: impl FnOnce(&mut RtitCtl)) -> Rig {
        Rig::with(RtitOptions { errata, ..RtitOptions::default() }, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff), extra)
    }

    #[test]
    fn e1_far_fup_inside_the_instruction_and_the_decoder_workaround() {
        let e1 = Errata { e1_far_fup_inside_insn: true, ..Errata::default() };
        let mut r = errata_rig(e1, |_| {});
        r.log();
        // jmp [0x100] at SETUP+2, then a 7-byte far JMP at 0x100 (FF 2C 25 disp32: jmp far [0x2000]).
        r.t.branch(SETUP + 2, SETUP + 9, BranchKind::IndirectJump, 0x100);
        r.t.far_transfer(0x100, 0x107, FarKind::FarJmp, 0x200, USER);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x300);
        let log = r.log();
        assert_eq!(log[1], fup(Far, z16(0x106)));
        let bytes = r.t.take_generated_bytes();
        let code = |ip: u64, buf: &mut [u8]| -> usize {
            let img: &[(u64, &[u8])] = &[(SETUP + 2, &[0xFF, 0x24, 0x25, 0, 1, 0, 0]), (0x100, &[0xFF, 0x2C, 0x25, 0, 0x20, 0, 0]), (0x200, &[0xFF, 0xE0])];
            for (at, b) in img {
                if ip >= *at && ip < at + b.len() as u64 {
                    let s = &b[(ip - at) as usize..];
                    buf[..s.len()].copy_from_slice(s);
                    return s.len();
                }
            }
            0
        };
        let plain = reconstruct(&bytes, &code, FlowOptions::default());
        assert!(plain.is_err(), "{plain:?}");
        let fixed = reconstruct(&bytes, &code, FlowOptions { errata: e1, ..FlowOptions::default() }).unwrap();
        assert_eq!(instructions(&fixed), [SETUP + 2, 0x100, 0x200]);
    }

    #[test]
    fn e2_extra_fup_pgd() {
        let e2 = Errata { e2_extra_pgd: true, ..Errata::default() };
        let mut r = Rig::with(RtitOptions { errata: e2, ..RtitOptions::default() }, RtitEvents::new(EventId::Range0, EventId::AlwaysOff), |_| {});
        r.w(RTIT_LIP0, 0x1000);
        r.w(RTIT_LIP2, 0x2000);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x1100);
        r.t.far_transfer(0x1100, 0x1102, FarKind::Syscall, 0xFFFF_FFFF_8100_0000, Context { cpl: 0, ..USER });
        // From the kernel (ContextEn 0) to user code outside the range: ContextEn 0 -> 1 and FilterEn
        // 1 -> 0 with PacketEn 0 before and after: the erratum's extra FUP.PGD.
        r.t.far_transfer(0xFFFF_FFFF_8100_0010, 0xFFFF_FFFF_8100_0013, FarKind::Sysret, 0x3000, USER);
        let log = r.log();
        assert_eq!(
            log,
            [Psb, fup(Pge, z16(0x1100)), fup(Pgd, z16(0x1102)), fup(Pgd, Lip::full(0xFFFF_8100_0013))]
        );
    }

    #[test]
    fn e3_delays_the_pkt_mask_psb_by_one_packet() {
        let e3 = Errata { e3_psb_delayed: true, ..Errata::default() };
        let mut r = errata_rig(e3, |_| {});
        r.log();
        r.w(RTIT_PKT_CNT, 0x7FE);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x300);
        let tip = |ip| Tip(z16(ip));
        assert_eq!(r.log(), [tip(0x200), tip(0x300), Psb]);
    }

    #[test]
    fn e4_trace_stop_during_overflow_keeps_trace_active() {
        let opts = RtitOptions { errata: Errata { e4_stop_keeps_trace_active: true, ..Errata::default() }, ..RtitOptions::default() };
        let mut r = Rig::with(opts, RtitEvents::new(EventId::AlwaysOn, EventId::Range0), |_| {});
        r.w(RTIT_LIP0, 0x8000);
        r.w(RTIT_LIP2, 0x9000);
        r.log();
        // An undrained TIP, then an overflow set by software: it cannot clear yet.
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        r.w(RTIT_STATUS, 0b1001);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x8100);
        // The TraceStop packet goes out before the overflow resolves and TraceActive stays set.
        assert_eq!(r.log(), [Tip(z16(0x200)), TraceStop]);
        assert!(r.ctl().trace_active());
    }

    #[test]
    fn e5_tip_after_buffovf_and_the_decoder_workaround() {
        let e5 = Errata { e5_tip_after_buffovf: true, ..Errata::default() };
        let mut r = errata_rig(e5, |_| {});
        r.log();
        r.w(RTIT_STATUS, 0b1001);
        let mut mem = std::mem::take(&mut r.mem);
        r.t.drain(&mut mem);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        assert_eq!(r.log(), [fup(BuffOvf, z16(0x200)), Tip(z16(0x200))]);
        r.t.branch(0x200, 0x202, BranchKind::IndirectJump, 0x300);
        let bytes = r.t.take_generated_bytes();
        let code = |ip: u64, buf: &mut [u8]| -> usize {
            let b: &[u8] = match ip {
                0x9002 | 0x200 => &[0xFF, 0xE0],
                _ => &[],
            };
            buf[..b.len()].copy_from_slice(b);
            b.len()
        };
        let ev = reconstruct(&bytes, &code, FlowOptions { errata: e5, ..FlowOptions::default() }).unwrap();
        assert!(ev.contains(&FlowEvent::Overflow { ip: 0x200 }));
        assert_eq!(instructions(&ev).last(), Some(&0x200));
    }

    #[test]
    fn e6_cycle_counts_one_short() {
        let e6 = Errata { e6_cyc_minus_one: true, ..Errata::default() };
        let mut r = errata_rig(e6, |c| {
            c.set_cycle_acc(true);
        });
        r.log();
        r.t.set_tsc(10);
        r.t.branch(0x100, 0x102, BranchKind::IndirectJump, 0x200);
        assert_eq!(r.log(), [Tip(z16(0x200)), Cyc { cycles: 9 }]);
    }

    #[test]
    fn e7_an_mtc_right_after_enable() {
        let e7 = Errata { e7_early_first_mtc: true, ..Errata::default() };
        let mut r = errata_rig(e7, |c| {
            c.set_mtc_en(true);
        });
        assert_eq!(r.log(), [Psb, Mtc { range: 0, tsc: 0 }, fup(Pge, z16(SETUP + 2))]);
    }
}
