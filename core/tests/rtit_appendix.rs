//! RTIT Programming Reference v1.05 Appendix A (programming examples), §2.5.1 (Table 3 trace
//! example) and Appendix B §4.2 (re-enabling RTIT), as scenarios with exact packet sequences.

mod common;

/// Every test sits in `rtit` so `cargo test rtit` selects them.
mod rtit {
    use super::common::*;
    use pttrace_core::guest_mem::SparseMemory;
    use pttrace_core::insn_class::{BranchKind, FarKind};
    use pttrace_core::pt::packet::ExecMode;
    use pttrace_core::pt::tracer::{AsyncKind, Context};
    use pttrace_core::rtit::msr::*;
    use pttrace_core::rtit::packet::{FupKind, Lip, Packet};
    use pttrace_core::rtit::{RtitOptions, RtitTracer};

    use FupKind::*;
    use Packet::*;

    const APP_CR3: u64 = 0x1_2345_6000;
    const OTHER_CR3: u64 = 0x7_7777_7000;
    const APP: Context = Context { cpl: 3, cr3: APP_CR3, mode: ExecMode::Bit64 };
    const OTHER: Context = Context { cpl: 3, cr3: OTHER_CR3, mode: ExecMode::Bit64 };
    const KERNEL: Context = Context { cpl: 0, cr3: APP_CR3, mode: ExecMode::Bit64 };
    const KERNEL_ENTRY: u64 = 0xFFFF_FFFF_8100_0000;


    struct Sys {
        t: RtitTracer,
        mem: SparseMemory,
    }

    impl Sys {
        fn new(ctx: Context) -> Sys {
            let mut mem = SparseMemory::new();
            mem.add_ram(0x10_0000, 0x2_0000);
            let t = RtitTracer::new(RtitOptions::default(), ctx).with_packet_log();
            t.rdmsr(RTIT_CTL).unwrap();
            let mut s = Sys { t, mem };
            s.w(RTIT_BASE_ADDR, 0x10_0000);
            s.w(RTIT_LIMIT_MASK, 0xFFFF);
            s
        }

        /// WRMSR from a configuration routine at 0x9000 (outside every traced range).
        fn w(&mut self, msr: u32, v: u64) {
            self.t.wrmsr(msr, v, 0x9000, 0x9002, &mut self.mem).unwrap();
        }

        fn ctl(&self) -> RtitCtl {
            RtitCtl(self.t.rdmsr(RTIT_CTL).unwrap())
        }

        fn log(&mut self) -> Vec<Packet> {
            self.t.take_packet_log()
        }
    }

    #[test]
    fn appendix_a_trace_a_single_user_application() {
        // Configuration: USER only, LIPs around the application, CR3 match on its CR3.
        let mut s = Sys::new(APP);
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_cr3_en(true);
        s.w(RTIT_CTL, ctl.0);
        s.w(RTIT_LIP0, 0x40_0000);
        s.w(RTIT_LIP2, 0x50_0000);
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::Range0, EventId::AlwaysOff).0);
        s.w(RTIT_CR3_MATCH, APP_CR3);
        // "Start tracing: Set Trace_En": on its own that leaves TriggerEn = 0 (TraceActive is also
        // needed, §2.1.1), so nothing is generated yet.
        ctl.set_trace_en(true);
        s.w(RTIT_CTL, ctl.0);
        assert_eq!(s.log(), []);
        assert_eq!(s.t.rdmsr(RTIT_STATUS), Some(0b010));
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        assert_eq!(s.log(), [Psb]);
        // The application enters its code: FUP.PGE; a branch in it: TNT.
        s.t.branch(0x3F_0000, 0x3F_0005, BranchKind::DirectCall { target: 0x40_1000 }, 0x40_1000);
        s.t.branch(0x40_1000, 0x40_1002, BranchKind::Conditional { target: 0x40_1100 }, 0x40_1100);
        // A system call leaves the traced context (row 32); its return comes back (row 34).
        s.t.far_transfer(0x40_1100, 0x40_1102, FarKind::Syscall, KERNEL_ENTRY, KERNEL);
        s.t.branch(KERNEL_ENTRY, KERNEL_ENTRY + 2, BranchKind::IndirectJump, KERNEL_ENTRY + 0x80);
        s.t.far_transfer(KERNEL_ENTRY + 0x80, KERNEL_ENTRY + 0x83, FarKind::Sysret, 0x40_1102, APP);
        // A context switch to another process with the same linear addresses is not traced.
        s.t.async_event(AsyncKind::Interrupt { resume_ip: 0x40_1102 }, KERNEL_ENTRY + 0x200, KERNEL);
        s.t.mov_cr3(KERNEL_ENTRY + 0x203, OTHER_CR3);
        s.t.far_transfer(KERNEL_ENTRY + 0x300, KERNEL_ENTRY + 0x302, FarKind::Iret, 0x40_1500, OTHER);
        s.t.branch(0x40_1500, 0x40_1502, BranchKind::IndirectJump, 0x40_1600);
        assert_eq!(
            s.log(),
            [
                fup(Pge, z32(0x40_1000)),
                Tnt { bits: 1, count: 1 },
                fup(Pgd, c16(0x40_1102)),
                fup(Pge, c16(0x40_1102)),
                fup(Pgd, c16(0x40_1102)),
            ]
        );
        assert!(!s.t.context_en());
    }

    #[test]
    fn appendix_a_trace_all_applications_user_and_os() {
        let mut s = Sys::new(APP);
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_os(true);
        s.w(RTIT_CTL, ctl.0);
        // Tracing everything needs Filter_Event_ID = Always on (the reset value 000b selects RANGE0,
        // which RTIT_LIP0 = RTIT_LIP2 = 0 makes empty).
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff).0);
        ctl.set_trace_en(true);
        s.w(RTIT_CTL, ctl.0);
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        s.t.far_transfer(0x40_1100, 0x40_1102, FarKind::Syscall, KERNEL_ENTRY, KERNEL);
        s.t.far_transfer(KERNEL_ENTRY + 0x80, KERNEL_ENTRY + 0x83, FarKind::Sysret, 0x40_1102, APP);
        assert_eq!(
            s.log(),
            [
                Psb,
                fup(Pge, z16(0x9002)),
                fup(Far, z32(0x40_1102)),
                Tip(Lip::full(KERNEL_ENTRY & 0xFFFF_FFFF_FFFF)),
                fup(Far, c16(KERNEL_ENTRY + 0x83)),
                Tip(z32(0x40_1102)),
            ]
        );
    }

    #[test]
    fn appendix_a_trace_os_driver_code_only() {
        const DRV: u64 = 0xFFFF_FFFF_C000_0000;
        let mut s = Sys::new(KERNEL);
        let mut ctl = RtitCtl(0);
        ctl.set_os(true);
        s.w(RTIT_CTL, ctl.0);
        s.w(RTIT_LIP1, DRV);
        s.w(RTIT_LIP3, DRV + 0x1_0000);
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::Range1, EventId::AlwaysOff).0);
        ctl.set_trace_en(true);
        s.w(RTIT_CTL, ctl.0);
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        // Kernel code outside the driver: nothing; the call into the driver: FUP.PGE.
        s.t.branch(KERNEL_ENTRY, KERNEL_ENTRY + 2, BranchKind::IndirectJump, KERNEL_ENTRY + 0x40);
        s.t.branch(KERNEL_ENTRY + 0x40, KERNEL_ENTRY + 0x42, BranchKind::IndirectCall, DRV + 0x100);
        s.t.branch(DRV + 0x100, DRV + 0x102, BranchKind::Conditional { target: DRV + 0x200 }, DRV + 0x102);
        // The driver returns: TIP, FUP.PGD with the RET's NLIP (row 25).
        s.t.branch(DRV + 0x102, DRV + 0x103, BranchKind::Return, KERNEL_ENTRY + 0x42);
        // User code is never traced (ContextEn = 0).
        s.t.far_transfer(KERNEL_ENTRY + 0x80, KERNEL_ENTRY + 0x83, FarKind::Sysret, DRV + 0x100, APP);
        let drv = DRV & 0xFFFF_FFFF_FFFF;
        assert_eq!(
            s.log(),
            [
                Psb,
                fup(Pge, Lip::full(drv + 0x100)),
                Tnt { bits: 0, count: 1 },
                Tip(Lip { cnt: 1, zext: false, payload: (KERNEL_ENTRY + 0x42) & 0xFFFF_FFFF }),
                fup(Pgd, Lip { cnt: 1, zext: false, payload: (DRV + 0x103) & 0xFFFF_FFFF }),
            ]
        );
    }

    #[test]
    fn section_2_5_1_table_3_trace_example() {
        // All CPLs, filter range [0x100..0x110-1]. (Step 2 of Table 3 shows CLIP 0x100 right after a
        // jump to 0x102; it produces nothing either way and is left out.)
        let user = Context { cpl: 3, cr3: 0, mode: ExecMode::Bit64 };
        let kernel = Context { cpl: 0, ..user };
        let mut s = Sys::new(user);
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_os(true);
        s.w(RTIT_CTL, ctl.0);
        s.w(RTIT_LIP0, 0x100);
        s.w(RTIT_LIP2, 0x110);
        // TraceStop_Event_ID resets to 000b (RANGE0, the filter range itself): set it to Always off.
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::Range0, EventId::AlwaysOff).0);
        ctl.set_trace_en(true);
        s.w(RTIT_CTL, ctl.0);
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        assert_eq!(s.log(), [Psb]);
        // 1: JMP to 102 at 0x020: FUP.PGE of 102 (BLIP).
        s.t.branch(0x020, 0x023, BranchKind::DirectJump { target: 0x102 }, 0x102);
        assert_eq!(s.log(), [fup(Pge, z16(0x102))]);
        // 3: far JMP to 983 at 0x102: FUP.PGD of 105 (NLIP), TIP of 983 (BLIP).
        s.t.far_transfer(0x102, 0x105, FarKind::FarJmp, 0x983, user);
        assert_eq!(s.log(), [fup(Pgd, z16(0x105)), Tip(z16(0x983))]);
        // 4: far JMP to 10E at 0x983: FUP.PGE of 10E.
        s.t.far_transfer(0x983, 0x985, FarKind::FarJmp, 0x10E, user);
        assert_eq!(s.log(), [fup(Pge, z16(0x10E))]);
        // 5: divide by zero at 0x10E, handler at 345: FUP.PGD of 10E (the faulting CLIP), TIP of 345.
        s.t.async_event(AsyncKind::Fault { ip: 0x10E }, 0x345, kernel);
        assert_eq!(s.log(), [fup(Pgd, z16(0x10E)), Tip(z16(0x345))]);
        // 6-10: the handler runs and IRETs to 113 (outside the range): nothing.
        s.t.linear(0x348);
        s.t.linear(0x34C);
        s.t.linear(0x350);
        s.t.linear(0x353);
        s.t.far_transfer(0x353, 0x357, FarKind::Iret, 0x113, user);
        assert_eq!(s.log(), []);
    }

    /// A trace that ends by TraceStop (RANGE1 as the stop range) with two results left in
    /// RTIT_TNT_BUFF (§4.2.11: "the TNT buffer is not drained on a TraceStop action").
    fn stopped() -> Sys {
        let mut s = Sys::new(APP);
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_dest(true);
        s.w(RTIT_CTL, ctl.0);
        s.w(RTIT_LIP1, 0x40_8000);
        s.w(RTIT_LIP3, 0x40_9000);
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::AlwaysOn, EventId::Range1).0);
        ctl.set_trace_en(true);
        s.w(RTIT_CTL, ctl.0);
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        s.t.branch(0x9002, 0x9004, BranchKind::Conditional { target: 0x9100 }, 0x9100);
        s.t.branch(0x9100, 0x9102, BranchKind::Conditional { target: 0x9200 }, 0x9102);
        s.t.branch(0x9102, 0x9104, BranchKind::IndirectJump, 0x40_8010);
        assert_eq!(
            s.log(),
            [Psb, fup(Pge, z16(0x9002)), Tnt { bits: 0b10, count: 2 }, Tip(z32(0x40_8010)), TraceStop]
        );
        s.t.branch(0x40_8010, 0x40_8012, BranchKind::Conditional { target: 0x40_8100 }, 0x40_8100);
        assert_eq!(s.log(), []);
        assert!(!s.ctl().trace_active() && s.ctl().trace_en());
        // TraceStop forced FilterEn to 0, but with Trace_En still set the comparisons go on (§2.4.3)
        // and the Always-on filter event sets it again: hence step 1 of Appendix B §4.2.1.
        assert_eq!(s.t.rdmsr(RTIT_STATUS), Some(0b011));
        s
    }

    #[test]
    fn appendix_b_re_enable_with_same_configuration() {
        let mut s = stopped();
        // Leave two results behind in RTIT_TNT_BUFF, as a stop inside a loop would.
        s.w(RTIT_TNT_BUFF, 0b111);
        // 1. Clear FilterEn and BuffOvf; 2. reset RTIT_TNT_BUFF; 3. optionally reset CNTP, LAST_LIP,
        // LAST_CALL_NLIP.
        s.w(RTIT_STATUS, 0);
        s.w(RTIT_TNT_BUFF, 1);
        s.w(RTIT_CNTP, 0);
        s.w(RTIT_LAST_LIP, 0);
        s.w(RTIT_LAST_CALL_NLIP, 0);
        let mut ctl = s.ctl();
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        s.t.branch(0x9002, 0x9004, BranchKind::IndirectJump, 0x40_1000);
        assert_eq!(s.log(), [Psb, fup(Pge, z16(0x9002)), Tip(z32(0x40_1000))]);
    }

    #[test]
    fn appendix_b_skipping_the_tnt_reset_leaves_a_partial_tnt_before_fup_pge() {
        // §4.2.8: "That partial TNT would specify where RTIT was disabled."
        let mut s = stopped();
        s.w(RTIT_TNT_BUFF, 0b111);
        s.w(RTIT_STATUS, 0);
        let mut ctl = s.ctl();
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        assert_eq!(s.log(), [Psb, Tnt { bits: 0b11, count: 2 }, fup(Pge, z16(0x9002))]);
    }

    #[test]
    fn appendix_b_re_enable_with_different_output_region() {
        let mut s = stopped();
        // The collector rewrites RTIT_CTL first: the drain puts the old trace into the old region
        // (§3.3.2, §2.3.2 "always disable RTIT before collecting trace output").
        let old = s.ctl();
        s.w(RTIT_CTL, old.0);
        let before = s.t.take_generated_bytes();
        assert_eq!(s.mem.bytes(0x10_0000, before.len()), before);
        s.w(RTIT_STATUS, 0);
        s.w(RTIT_TNT_BUFF, 1);
        s.w(RTIT_BASE_ADDR, 0x11_0000);
        s.w(RTIT_LIMIT_MASK, 0x0FFF);
        s.w(RTIT_OFFSET, 0);
        let mut ctl = s.ctl();
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        // The enabling WRMSR drained PSB + FUP.PGE to the new region.
        let bytes = s.t.take_generated_bytes();
        let tail = &bytes[bytes.len() - 12..];
        assert_eq!(s.mem.bytes(0x11_0000, 12), tail);
        assert_eq!(tail, [0xC0, 0, 0, 0, 0, 0, 0, 0, 0, 0x84, 0x02, 0x90]);
        assert_eq!(s.t.rdmsr(RTIT_OFFSET), Some(12));
    }

    #[test]
    fn appendix_b_re_enable_with_different_traced_region() {
        let mut s = stopped();
        // Trace only RANGE0 = [0x40_8000..0x40_8FFF] (the old stop range), never stop. The events are
        // reprogrammed before FilterEn is cleared: with Trace_En set, the old Always-on filter event
        // would set FilterEn again at the next instruction boundary (the WRMSR's own).
        s.w(RTIT_LIP0, 0x40_8000);
        s.w(RTIT_LIP2, 0x40_9000);
        s.w(RTIT_EVENTS, RtitEvents::new(EventId::Range0, EventId::AlwaysOff).0);
        s.w(RTIT_STATUS, 0);
        s.w(RTIT_TNT_BUFF, 1);
        let mut ctl = s.ctl();
        ctl.set_trace_active(true);
        s.w(RTIT_CTL, ctl.0);
        s.t.branch(0x9002, 0x9004, BranchKind::IndirectJump, 0x40_8010);
        s.t.branch(0x40_8010, 0x40_8012, BranchKind::IndirectJump, 0x40_8020);
        s.t.linear(0x40_9000);
        assert_eq!(s.log(), [Psb, fup(Pge, z32(0x40_8010)), Tip(c16(0x40_8020)), fup(Pgd, c16(0x40_9000))]);
    }
}
