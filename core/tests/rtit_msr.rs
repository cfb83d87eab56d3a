//! The RTIT MSRs (RTIT Programming Reference v1.05 §3.3): reset values, the read-RTIT_CTL-first
//! rule (§3.3.1), reserved-bit #GP, read-only bits, sign extension of RTIT_LIPn, and the MSRs
//! that reflect internal state reading back what the model holds.

/// Every test sits in `rtit` so `cargo test rtit` selects them.
mod rtit {
    use pttrace_core::guest_mem::SparseMemory;
    use pttrace_core::insn_class::BranchKind;
    use pttrace_core::pt::msr::Fault;
    use pttrace_core::pt::tracer::Context;
    use pttrace_core::rtit::msr::*;
    use pttrace_core::rtit::packet::{Lip, Packet};
    use pttrace_core::rtit::{RtitOptions, RtitTracer};

    const IP: u64 = 0x40_1000;

    fn fresh() -> (RtitTracer, SparseMemory) {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x10_0000, 0x1_0000);
        (RtitTracer::new(RtitOptions::default(), Context::USER64).with_packet_log(), mem)
    }

    fn unlocked() -> (RtitTracer, SparseMemory) {
        let (t, mem) = fresh();
        t.rdmsr(RTIT_CTL).unwrap();
        (t, mem)
    }

    fn w(t: &mut RtitTracer, mem: &mut SparseMemory, msr: u32, v: u64) -> Result<(), Fault> {
        t.wrmsr(msr, v, IP, IP + 2, mem)
    }

    /// User tracing of everything (Filter = Always on, TraceStop = Always off), output at 1 MiB.
    fn tracing(extra: impl FnOnce(&mut RtitCtl)) -> (RtitTracer, SparseMemory) {
        let (mut t, mut mem) = unlocked();
        w(&mut t, &mut mem, RTIT_BASE_ADDR, 0x10_0000).unwrap();
        w(&mut t, &mut mem, RTIT_LIMIT_MASK, 0xFFFF).unwrap();
        w(&mut t, &mut mem, RTIT_EVENTS, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff).0).unwrap();
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_trace_en(true);
        extra(&mut ctl);
        w(&mut t, &mut mem, RTIT_CTL, ctl.0).unwrap();
        ctl.set_trace_active(true);
        w(&mut t, &mut mem, RTIT_CTL, ctl.0).unwrap();
        (t, mem)
    }

    #[test]
    fn reset_values_match_section_3_3() {
        let (t, _) = unlocked();
        let expect = [
            (RTIT_LIP0, 0),
            (RTIT_LIP1, 0),
            (RTIT_LIP2, 0),
            (RTIT_LIP3, 0),
            (RTIT_CTL, 0),
            (RTIT_STATUS, 0),
            (RTIT_CNTP, 0),
            (RTIT_EVENTS, 0),
            (RTIT_LAST_LIP, 0),
            (RTIT_LAST_CALL_NLIP, 0),
            (RTIT_BASE_ADDR, 0xFDC0_0000),
            (RTIT_LIMIT_MASK, 0x7F),
            (RTIT_OFFSET, 0),
            (RTIT_CR3_MATCH, 0),
            (RTIT_PKT_CNT, 0x0002_0000),
            (RTIT_TNT_BUFF, 1),
        ];
        assert_eq!(expect.len(), ALL_MSRS.len());
        for (msr, v) in expect {
            assert_eq!(t.rdmsr(msr), Some(v), "MSR {msr:#x}");
        }
    }

    #[test]
    fn rtit_ctl_must_be_read_before_any_other_access() {
        let (mut t, mut mem) = fresh();
        for msr in ALL_MSRS {
            assert!(RtitTracer::owns(msr));
            if msr != RTIT_CTL {
                assert_eq!(t.try_rdmsr(msr), Err(Fault::Gp), "read {msr:#x}");
            }
            // Writes #GP too, RTIT_CTL included.
            let v = t.msrs().stored(msr).unwrap();
            assert_eq!(w(&mut t, &mut mem, msr, v), Err(Fault::Gp), "write {msr:#x}");
        }
        assert_eq!(t.try_rdmsr(RTIT_CTL), Ok(0));
        assert_eq!(t.try_rdmsr(RTIT_TNT_BUFF), Ok(1));
        assert_eq!(w(&mut t, &mut mem, RTIT_CTL, 0), Ok(()));
        assert!(!RtitTracer::owns(0x570));
        assert_eq!(t.rdmsr(0x570), None);
    }

    #[test]
    fn reserved_bits_gp_and_leave_the_msr_unchanged() {
        // (MSR, a value touching a reserved bit, the widest legal value).
        let cases: [(u32, u64, u64); 14] = [
            (RTIT_CTL, 1 << 5, 0xFF9E),
            (RTIT_CTL, 1 << 16, 0xFF9E),
            (RTIT_STATUS, 1 << 4, 0b1001),
            (RTIT_CNTP, 1 << 22, 0x3F_FFFF),
            (RTIT_EVENTS, 1 << 6, 0x3F),
            (RTIT_LAST_LIP, 1 << 33, 0x1_FFFF_FFFF),
            (RTIT_LAST_CALL_NLIP, 1 << 49, 0x1_FFFF_FFFF_FFFF),
            (RTIT_BASE_ADDR, 0x20, 0xF_FFFF_FFC0),
            (RTIT_BASE_ADDR, 1 << 36, 0x40),
            (RTIT_LIMIT_MASK, 1 << 22, 0x3F_FFFF),
            (RTIT_OFFSET, 1 << 22, 0x3F_FFFF),
            (RTIT_CR3_MATCH, 0x10, 0xF_FFFF_FFE0),
            (RTIT_PKT_CNT, 1 << 14, 0x3_3FFF & !0x800),
            (RTIT_TNT_BUFF, 0x80, 0x7F),
        ];
        for (msr, bad, good) in cases {
            let (mut t, mut mem) = unlocked();
            let before = t.rdmsr(msr);
            assert_eq!(w(&mut t, &mut mem, msr, bad), Err(Fault::Gp), "{msr:#x} <- {bad:#x}");
            assert_eq!(t.rdmsr(msr), before);
            assert_eq!(w(&mut t, &mut mem, msr, good), Ok(()), "{msr:#x} <- {good:#x}");
            if msr != RTIT_CTL {
                assert_eq!(t.rdmsr(msr), Some(good), "{msr:#x}");
            }
        }
    }

    #[test]
    fn limit_mask_low_bits_are_reserved_as_3f_and_tnt_buff_refuses_zero() {
        let (mut t, mut mem) = unlocked();
        assert_eq!(w(&mut t, &mut mem, RTIT_LIMIT_MASK, 0xFF00), Err(Fault::Gp));
        assert_eq!(w(&mut t, &mut mem, RTIT_LIMIT_MASK, 0xFF3E), Err(Fault::Gp));
        assert_eq!(w(&mut t, &mut mem, RTIT_LIMIT_MASK, 0xFF3F), Ok(()));
        assert_eq!(w(&mut t, &mut mem, RTIT_TNT_BUFF, 0), Err(Fault::Gp));
        assert_eq!(t.rdmsr(RTIT_TNT_BUFF), Some(1));
    }

    #[test]
    fn lip_registers_sign_extend_bit_47_and_ignore_written_upper_bits() {
        let (mut t, mut mem) = unlocked();
        w(&mut t, &mut mem, RTIT_LIP0, 0x0000_8000_0000_1000).unwrap();
        assert_eq!(t.rdmsr(RTIT_LIP0), Some(0xFFFF_8000_0000_1000));
        w(&mut t, &mut mem, RTIT_LIP3, 0x1234_7FFF_FFFF_F000).unwrap();
        assert_eq!(t.rdmsr(RTIT_LIP3), Some(0x0000_7FFF_FFFF_F000));
        w(&mut t, &mut mem, RTIT_LIP1, 0xFFFF_FFFF_8000_0000).unwrap();
        assert_eq!(t.rdmsr(RTIT_LIP1), Some(0xFFFF_FFFF_8000_0000));
        assert_eq!(t.range_addresses()[1], 0xFFFF_8000_0000);
    }

    #[test]
    fn status_context_and_trigger_en_are_read_only_and_computed() {
        let (mut t, mut mem) = unlocked();
        // Writing the read-only bits neither faults nor sticks.
        w(&mut t, &mut mem, RTIT_STATUS, 0b0110).unwrap();
        // USER = 0 at CPL 3: ContextEn = 0.
        assert_eq!(t.rdmsr(RTIT_STATUS), Some(0));
        let (t, _) = tracing(|_| {});
        // FilterEn (Always on), ContextEn, TriggerEn.
        assert_eq!(t.rdmsr(RTIT_STATUS), Some(0b0111));
    }

    #[test]
    fn filter_en_and_buffer_overflow_are_writable() {
        let (mut t, mut mem) = unlocked();
        w(&mut t, &mut mem, RTIT_STATUS, 0b1001).unwrap();
        assert_eq!(t.rdmsr(RTIT_STATUS), Some(0b1001));
        assert!(t.overflow() && t.filter_en());
        w(&mut t, &mut mem, RTIT_STATUS, 0).unwrap();
        assert_eq!(t.rdmsr(RTIT_STATUS), Some(0));
    }

    #[test]
    fn ctl_write_drains_and_offset_reads_back_the_drained_position() {
        let (mut t, mut mem) = tracing(|_| {});
        // The enabling write drained PSB + FUP.PGE(IP+2) into the region.
        let generated = t.take_generated_bytes();
        assert_eq!(t.rdmsr(RTIT_OFFSET), Some(generated.len() as u64));
        assert_eq!(mem.bytes(0x10_0000, generated.len()), generated);
        t.branch(IP + 2, IP + 4, BranchKind::IndirectJump, IP + 0x100);
        assert_eq!(t.pending_bytes().len(), 3);
        assert_eq!(t.rdmsr(RTIT_OFFSET), Some(generated.len() as u64));
        let ctl = t.rdmsr(RTIT_CTL).unwrap();
        w(&mut t, &mut mem, RTIT_CTL, ctl & !(1 << 13)).unwrap();
        assert_eq!(t.rdmsr(RTIT_OFFSET), Some(generated.len() as u64 + 3));
        assert!(t.pending_bytes().is_empty());
    }

    #[test]
    fn state_msrs_read_back_what_the_model_holds() {
        let (mut t, _) = tracing(|c| {
            c.set_cmprs_ret(true);
        });
        // PSB (9) + FUP.PGE of IP+2 = 0x401002 (4-byte zero-extended LIP, 5 bytes).
        assert_eq!(t.rdmsr(RTIT_PKT_CNT), Some(0x2_0000 | 14));
        assert_eq!(t.rdmsr(RTIT_LAST_LIP), Some((1 << 32) | 0x40));
        t.branch(IP + 2, IP + 7, BranchKind::DirectCall { target: 0x7F00_1234_5678 }, 0x7F00_1234_5678);
        assert_eq!(t.rdmsr(RTIT_LAST_CALL_NLIP), Some((1 << 48) | (IP + 7)));
        t.branch(0x7F00_1234_5678, 0x7F00_1234_567A, BranchKind::Conditional { target: 0x7F00_1234_5000 }, 0x7F00_1234_5000);
        t.branch(0x7F00_1234_5000, 0x7F00_1234_5002, BranchKind::Conditional { target: 0 }, 0x7F00_1234_5002);
        assert_eq!(t.rdmsr(RTIT_TNT_BUFF), Some(0b110));
        t.branch(0x7F00_1234_5002, 0x7F00_1234_5004, BranchKind::IndirectJump, 0x7F00_1234_6000);
        // TIP 0x7F0012346000 against 0x401002: 6 bytes; LAST_LIP = LIP[47:16].
        assert_eq!(t.rdmsr(RTIT_LAST_LIP), Some((1 << 32) | (0x7F00 << 16) | 0x1234));
        assert_eq!(t.rdmsr(RTIT_TNT_BUFF), Some(1));
        assert_eq!(t.rdmsr(RTIT_PKT_CNT), Some(0x2_0000 | (14 + 1 + 7)));
        // A software-written RTIT_LAST_LIP is what the next LIP compresses against.
        let mut mem = SparseMemory::new();
        t.wrmsr(RTIT_LAST_LIP, (1 << 32) | (0x7F00 << 16) | 0x5555, 0x7F00_1234_6000, 0x7F00_1234_6002, &mut mem).unwrap();
        t.take_packet_log();
        t.branch(0x7F00_1234_6002, 0x7F00_1234_6004, BranchKind::IndirectJump, 0x7F00_5555_0010);
        assert_eq!(t.take_packet_log(), [Packet::Tip(Lip { cnt: 0, zext: false, payload: 0x0010 })]);
    }

    #[test]
    fn cntp_counts_core_cycles_and_reads_back() {
        let (mut t, mut mem) = tracing(|_| {});
        t.set_tsc(1000);
        t.set_tsc(1500);
        assert_eq!(t.rdmsr(RTIT_CNTP), Some(1500));
        w(&mut t, &mut mem, RTIT_CNTP, 0x3F_FFF0).unwrap();
        t.set_tsc(1520);
        // 22-bit counter: wraps (§3.3.4 "reset back to 22'b0 when CNTP overflows").
        assert_eq!(t.rdmsr(RTIT_CNTP), Some(4));
    }

    #[test]
    fn pkt_cnt_write_with_the_monitored_bit_sends_a_psb() {
        let (mut t, mut mem) = tracing(|_| {});
        t.take_packet_log();
        // Pkt_Mask = 0 watches bit 11.
        w(&mut t, &mut mem, RTIT_PKT_CNT, 0x800).unwrap();
        assert_eq!(t.take_packet_log(), [Packet::Psb]);
        assert_eq!(t.rdmsr(RTIT_PKT_CNT), Some(9));
        assert_eq!(t.rdmsr(RTIT_LAST_LIP), Some(0));
    }

    #[test]
    fn writing_tnt_buff_and_last_call_nlip_restores_state_for_compression() {
        let (mut t, mut mem) = tracing(|c| {
            c.set_cmprs_ret(true);
        });
        t.take_packet_log();
        // Context-switch restore: two pending results and a last CALL at 0x401234.
        w(&mut t, &mut mem, RTIT_TNT_BUFF, 0b110).unwrap();
        w(&mut t, &mut mem, RTIT_LAST_CALL_NLIP, (1 << 48) | 0x40_1234).unwrap();
        t.branch(IP + 2, IP + 3, BranchKind::Return, 0x40_1234);
        t.branch(0x40_1234, 0x40_1236, BranchKind::IndirectJump, 0x40_2000);
        assert_eq!(
            t.take_packet_log(),
            [Packet::Tnt { bits: 0b101, count: 3 }, Packet::Tip(Lip { cnt: 0, zext: false, payload: 0x2000 })]
        );
    }
}
