//! Scenario tests of the counting PMU (SDM Vol. 3B §20.2).
use super::*;
use crate::insn_class::{BranchKind, FarKind};

const EN: u64 = 1 << 22;
const INT: u64 = 1 << 20;
const USR: u64 = 1 << 16;
const OS: u64 = 1 << 17;

fn skl() -> Pmu {
    Pmu::new(PmuCaps::SKYLAKE)
}

#[test]
fn cpuid_0a_of_the_skylake_profile() {
    // Version 4, 4 x 48-bit GP counters, EBX length 7 with LLC references/misses unavailable,
    // 3 x 48-bit fixed counters.
    assert_eq!(PmuCaps::SKYLAKE.cpuid_0a(), [0x0730_0404, 0x18, 0, 0x603]);
    assert_eq!(PmuCaps::SILVERMONT.cpuid_0a(), [0x0728_0203, 0x18, 0, 0x503]);
}

#[test]
fn linux_check_hw_exists_counter_round_trip() {
    // events/core.c: read the last counter, flip its low 16 bits, write, read back.
    let mut p = skl();
    let reg = IA32_PMC0 + 3;
    let v = p.read(reg).unwrap() ^ 0xFFFF;
    p.write(reg, v).unwrap();
    assert_eq!(p.read(reg), Ok(v));
}

#[test]
fn msr_gp_and_read_back_rules() {
    let mut p = skl();
    // Counters and selects the part does not have.
    assert_eq!(p.read(IA32_PMC0 + 4), Err(Fault::Gp));
    assert_eq!(p.write(IA32_PERFEVTSEL0 + 4, 0), Err(Fault::Gp));
    assert_eq!(p.read(IA32_FIXED_CTR0 + 3), Err(Fault::Gp));
    assert!(Pmu::owns(IA32_PMC0 + 7) && !Pmu::owns(IA32_PMC0 + 8));
    // Reserved bits.
    assert_eq!(p.write(IA32_PERF_GLOBAL_CTRL, 1 << 40), Err(Fault::Gp));
    assert_eq!(p.write(IA32_PERF_GLOBAL_CTRL, 0x7_0000_000F), Ok(()));
    assert_eq!(p.write(IA32_PERFEVTSEL0, 1 << 32), Err(Fault::Gp));
    assert_eq!(p.write(IA32_PERFEVTSEL0, 1 << 21), Ok(()), "AnyThread exists in version 3+");
    assert_eq!(p.write(IA32_FIXED_CTR_CTRL, 0x1000), Err(Fault::Gp));
    assert_eq!(p.write(IA32_FIXED_CTR_CTRL, 0xFFF), Ok(()));
    assert_eq!(p.read(IA32_FIXED_CTR_CTRL), Ok(0xFFF));
    // Read-only registers.
    assert_eq!(p.write(IA32_PERF_GLOBAL_STATUS, 0), Err(Fault::Gp));
    assert_eq!(p.write(IA32_PERF_GLOBAL_INUSE, 0), Err(Fault::Gp));
    assert_eq!(p.write(IA32_PERF_CAPABILITIES, 0), Err(Fault::Gp));
    assert_eq!(p.read(IA32_PERF_CAPABILITIES), Ok(PERF_CAP_FW_WRITE | PERF_CAP_PEBS_TRAP | PERF_CAP_PEBS_ARCH_REG | (3 << 8) | 5));
    // Legacy 32-bit writes sign-extend; full-width writes through IA32_A_PMCx.
    p.write(IA32_PMC0, 0xFFFF_FFFF_8000_0000).unwrap();
    assert_eq!(p.read(IA32_PMC0), Ok(0xFFFF_8000_0000));
    p.write(IA32_PMC0, 0x7FFF_FFFF).unwrap();
    assert_eq!(p.read(IA32_PMC0), Ok(0x7FFF_FFFF));
    p.write(IA32_A_PMC0 + 1, 0x1234_8000_0000).unwrap();
    assert_eq!(p.read(IA32_PMC0 + 1), Ok(0x1234_8000_0000));
    assert_eq!(p.read(IA32_A_PMC0 + 1), Ok(0x1234_8000_0000));
    assert_eq!(p.write(IA32_A_PMC0, 1 << 48), Err(Fault::Gp));
    assert_eq!(p.write(IA32_FIXED_CTR0, 1 << 48), Err(Fault::Gp));
    // Without FW_WRITE there are no IA32_A_PMCx and no PERF_CAPABILITIES.
    let slm = Pmu::new(PmuCaps::SILVERMONT);
    assert_eq!(slm.read(IA32_A_PMC0), Err(Fault::Gp));
    assert_eq!(slm.read(IA32_PERF_CAPABILITIES), Err(Fault::Gp));
    assert_eq!(slm.read(IA32_PERF_GLOBAL_INUSE), Err(Fault::Gp), "INUSE is version 4");
    assert_eq!(slm.check_write(IA32_PERF_GLOBAL_STATUS_RESET, STATUS_CTR_FRZ), Err(Fault::Gp));
    assert_eq!(slm.check_write(IA32_PMC0 + 1, 0), Ok(()));
    assert_eq!(slm.check_write(IA32_PMC0 + 2, 0), Err(Fault::Gp));
}

#[test]
fn global_status_reset_set_and_inuse() {
    let mut p = skl();
    p.write(IA32_PERF_GLOBAL_STATUS_SET, 0b101 | (1 << 33) | STATUS_OVF_BUFFER).unwrap();
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS), Ok(0b101 | (1 << 33) | STATUS_OVF_BUFFER));
    p.write(IA32_PERF_GLOBAL_STATUS_RESET, 0b1 | STATUS_OVF_BUFFER).unwrap();
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS), Ok(0b100 | (1 << 33)));
    assert_eq!(p.write(IA32_PERF_GLOBAL_STATUS_RESET, 1 << 4), Err(Fault::Gp), "no PMC4");
    assert_eq!(p.write(IA32_PERF_GLOBAL_STATUS_SET, STATUS_COND_CHGD), Err(Fault::Gp));
    p.write(IA32_PERFEVTSEL0 + 2, 0xC0 | USR).unwrap();
    p.write(IA32_FIXED_CTR_CTRL, 0xA00).unwrap();
    assert_eq!(p.read(IA32_PERF_GLOBAL_INUSE), Ok((1 << 2) | (1 << 34) | (1 << 63)));
}

#[test]
fn nothing_counts_until_a_counter_is_enabled_globally_and_locally() {
    let mut p = skl();
    assert!(!p.active());
    p.write(IA32_PERF_GLOBAL_CTRL, 0).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | OS | EN).unwrap();
    assert!(!p.active());
    p.retire(100, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(0));
    p.write(IA32_PERF_GLOBAL_CTRL, 1).unwrap();
    assert!(p.active());
    p.retire(100, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(100));
}

#[test]
fn usr_os_filters_by_cpl() {
    let mut p = skl();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN).unwrap();
    p.write(IA32_PERFEVTSEL0 + 1, 0xC0 | OS | EN).unwrap();
    p.write(IA32_FIXED_CTR_CTRL, 0x3).unwrap(); // fixed 0, OS and USR
    p.retire(10, Retired::PLAIN, 3);
    p.retire(7, Retired::PLAIN, 0);
    assert_eq!((p.read(IA32_PMC0), p.read(IA32_PMC0 + 1), p.read(IA32_FIXED_CTR0)), (Ok(10), Ok(7), Ok(17)));
}

#[test]
fn branch_events_count_their_umask() {
    let mut p = skl();
    let sel = |umask: u64, ev: u64| ev | (umask << 8) | USR | OS | EN;
    p.write(IA32_PERFEVTSEL0, sel(0x00, 0xC4)).unwrap(); // all branches
    p.write(IA32_PERFEVTSEL0 + 1, sel(0x01, 0xC4)).unwrap(); // conditional
    p.write(IA32_PERFEVTSEL0 + 2, sel(0x20, 0xC4)).unwrap(); // near taken
    p.write(IA32_PERFEVTSEL0 + 3, sel(0x00, 0xC5)).unwrap(); // mispredicted
    // A loop `L: ...; dec; jnz L` run 10 times: 9 taken (predicted) + 1 not taken (mispredicted),
    // then a CALL, a RET and a SYSCALL.
    let jcc = BranchKind::Conditional { target: 0x100 };
    p.retire(9, Retired::of(jcc, 0x110, 0x112, 0x100), 3);
    p.retire(1, Retired::of(jcc, 0x110, 0x112, 0x112), 3);
    p.retire(1, Retired::of(BranchKind::DirectCall { target: 0x500 }, 0x112, 0x117, 0x500), 3);
    p.retire(1, Retired::of(BranchKind::Return, 0x500, 0x501, 0x117), 3);
    p.retire(1, Retired::of(BranchKind::Far(FarKind::Syscall), 0x117, 0x119, 0xFFFF_8000_0000_1000), 3);
    assert_eq!(p.read(IA32_PMC0), Ok(13));
    assert_eq!(p.read(IA32_PMC0 + 1), Ok(10));
    assert_eq!(p.read(IA32_PMC0 + 2), Ok(11));
    assert_eq!(p.read(IA32_PMC0 + 3), Ok(2), "the loop exit and the far branch");
}

#[test]
fn unmodelled_encodings_and_edge_do_not_count() {
    let mut p = skl();
    p.write(IA32_PERFEVTSEL0, 0x4F2E | USR | OS | EN).unwrap(); // LLC references
    p.write(IA32_PERFEVTSEL0 + 1, 0xC0 | USR | EN | (1 << 18) | (1 << 24)).unwrap(); // edge
    p.retire(5, Retired::PLAIN, 3);
    assert_eq!((p.read(IA32_PMC0), p.read(IA32_PMC0 + 1)), (Ok(0), Ok(0)));
}

#[test]
fn cycles_pp_alias_counts_core_cycles() {
    let mut p = skl();
    p.write(IA32_PERFEVTSEL0, 0x1080_00C0 | USR | EN).unwrap(); // INV, CMASK = 16
    p.write(IA32_FIXED_CTR_CTRL, 0x220).unwrap(); // fixed 1 and 2, USR
    assert!(p.counts_cycles());
    p.retire(5, Retired::PLAIN, 3);
    p.cycles(1000, 3);
    p.cycles(50, 0);
    assert_eq!((p.read(IA32_PMC0), p.read(IA32_FIXED_CTR0 + 1), p.read(IA32_FIXED_CTR0 + 2)), (Ok(1000), Ok(1000), Ok(1000)));
}

#[test]
fn overflow_sets_global_status_and_int_asks_for_a_pmi() {
    let mut p = skl();
    p.write(IA32_A_PMC0, (1 << 48) - 5).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN | INT).unwrap();
    p.write(IA32_A_PMC0 + 1, (1 << 48) - 5).unwrap();
    p.write(IA32_PERFEVTSEL0 + 1, 0xC0 | USR | EN).unwrap();
    assert!(!p.pmi_within(3, None, 3));
    assert!(p.pmi_within(4, Some(Retired::PLAIN), 3));
    assert!(!p.pmi_within(4, Some(Retired::PLAIN), 0), "OS instructions are not counted");
    assert!(!p.retire(4, Retired::PLAIN, 3));
    assert_eq!(p.global_status(), 0);
    assert!(p.retire(3, Retired::PLAIN, 3));
    assert_eq!(p.read(IA32_PMC0), Ok(2));
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS), Ok(0b11), "both overflowed; only PMC0 interrupts");
    // Without freeze the counters go on.
    p.retire(1, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(3));
}

#[test]
fn legacy_freeze_clears_global_ctrl_version_4_sets_ctr_frz() {
    let mut slm = Pmu::new(PmuCaps::SILVERMONT);
    slm.set_debugctl(1 << 12);
    slm.write(IA32_PMC0, 0xFFFF_FFFF).unwrap(); // -1, sign-extended to 40 bits
    slm.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN | INT).unwrap();
    assert!(slm.retire(1, Retired::PLAIN, 3));
    assert_eq!(slm.read(IA32_PERF_GLOBAL_CTRL), Ok(0x7_0000_0003), "not before the PMI is requested");
    assert!(slm.take_pmi());
    assert!(!slm.take_pmi());
    assert_eq!(slm.read(IA32_PERF_GLOBAL_CTRL), Ok(0));
    slm.retire(5, Retired::PLAIN, 3);
    assert_eq!(slm.read(IA32_PMC0), Ok(0), "frozen");

    let mut p = skl();
    p.set_debugctl((1 << 12) | (1 << 11));
    p.write(IA32_A_PMC0, (1 << 48) - 1).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN | INT).unwrap();
    assert!(!p.lbr_freeze_requested());
    assert!(p.retire(1, Retired::PLAIN, 3));
    // FREEZE_LBRS_ON_PMI: the LBRs stop at the request, before take_pmi sets LBR_Frz.
    assert!(p.lbr_freeze_requested());
    assert_eq!(p.global_status() & STATUS_LBR_FRZ, 0);
    p.retire(2, Retired::PLAIN, 3); // the rest of the block still counts
    assert!(p.take_pmi());
    assert!(!p.lbr_freeze_requested(), "from here LBR_Frz holds the freeze");
    assert_eq!(p.read(IA32_PMC0), Ok(2));
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS), Ok(1 | STATUS_CTR_FRZ | STATUS_LBR_FRZ));
    assert_eq!(p.read(IA32_PERF_GLOBAL_CTRL), Ok(0x7_0000_000F), "GLOBAL_CTRL untouched in version 4");
    p.retire(5, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(2), "frozen");
    p.write(IA32_PERF_GLOBAL_STATUS_RESET, 1 | STATUS_CTR_FRZ | STATUS_LBR_FRZ).unwrap();
    p.retire(5, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(7), "unfrozen");
}

#[test]
fn legacy_freeze_lbrs_on_pmi_clears_debugctl_lbr_until_debugctl_is_written() {
    // Core 2 (version 2): the PMI request freezes the LBRs and the PMI clears DEBUGCTL[0] LBR
    // (no LBR_Frz below version 4); a write of DEBUGCTL sets it again.
    let mut p = Pmu::new(PmuCaps::CORE2);
    p.set_debugctl(1 | (1 << 11));
    p.write(IA32_PMC0, 0xFFFF_FFFF).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN | INT).unwrap();
    assert!(p.retire(1, Retired::PLAIN, 3));
    assert!(p.lbr_freeze_requested(), "frozen from the request on");
    assert!(!p.debugctl_lbr_cleared());
    assert!(p.take_pmi());
    assert!(p.debugctl_lbr_cleared());
    assert_eq!(p.debugctl_read(1 | (1 << 11)), 1 << 11);
    assert_eq!(p.global_status() & STATUS_LBR_FRZ, 0, "no LBR_Frz in version 2");
    p.set_debugctl(1 | (1 << 11));
    assert!(!p.debugctl_lbr_cleared());
    assert_eq!(p.debugctl_read(1 | (1 << 11)), 1 | (1 << 11));
    // Without FREEZE_LBRS_ON_PMI a PMI leaves DEBUGCTL.LBR alone.
    p.set_debugctl(1);
    p.write(IA32_PMC0, 0xFFFF_FFFF).unwrap();
    assert!(p.retire(1, Retired::PLAIN, 3));
    assert!(p.take_pmi());
    assert!(!p.debugctl_lbr_cleared());
    // Version 4 freezes through LBR_Frz instead (the test above).
    let mut s = skl();
    s.set_debugctl(1 | (1 << 11));
    s.write(IA32_A_PMC0, (1 << 48) - 1).unwrap();
    s.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN | INT).unwrap();
    assert!(s.retire(1, Retired::PLAIN, 3) && s.take_pmi());
    assert!(!s.debugctl_lbr_cleared());
    assert_ne!(s.global_status() & STATUS_LBR_FRZ, 0);
}

#[test]
fn rdpmc_selects_counters_and_faults_as_the_sdm_says() {
    let mut p = skl();
    p.write(IA32_A_PMC0 + 3, 0x1_2345_6789).unwrap();
    p.write(IA32_FIXED_CTR0 + 2, 0x55).unwrap();
    assert_eq!(p.rdpmc(3, 0, false, true), Ok(0x1_2345_6789));
    assert_eq!(p.rdpmc(3 | (1 << 31), 0, false, true), Ok(0x2345_6789), "fast read");
    assert_eq!(p.rdpmc(0x4000_0002, 0, false, true), Ok(0x55));
    assert_eq!(p.rdpmc(4, 0, false, true), Err(Fault::Gp));
    assert_eq!(p.rdpmc(0x4000_0003, 0, false, true), Err(Fault::Gp));
    assert_eq!(p.rdpmc(0x100, 0, false, true), Err(Fault::Gp));
    assert_eq!(p.rdpmc(3, 3, false, true), Err(Fault::Gp), "CR4.PCE = 0 at CPL 3");
    assert_eq!(p.rdpmc(3, 3, true, true), Ok(0x1_2345_6789));
}

#[test]
fn skylake_enumerates_pebs_format_3_trap_like_and_silvermont_none() {
    // PERF_CAPABILITIES[6] trap, [7] arch regs, [11:8] format 3, [13] FW_WRITE, [5:0] LBR 5.
    assert_eq!(PmuCaps::SKYLAKE.perf_capabilities(), Some(0x23C5));
    assert_eq!(PmuCaps::SKYLAKE.pebs_enable_bits(), Some(0xF_0000_000F));
    assert_eq!(PmuCaps::SILVERMONT.pebs_enable_bits(), None);
    assert_eq!(Pmu::new(PmuCaps::SILVERMONT).read(IA32_PEBS_ENABLE), Err(Fault::Gp));
}

#[test]
fn pebs_enable_reserved_bits_gp_and_read_back() {
    let mut p = skl();
    assert_eq!(p.read(IA32_PEBS_ENABLE), Ok(0));
    for bad in [1 << 4, 1 << 31, 1 << 36, 1 << 63] {
        assert_eq!(p.write(IA32_PEBS_ENABLE, bad), Err(Fault::Gp), "{bad:#x}");
    }
    p.write(IA32_PEBS_ENABLE, 0x3_0000_0005).unwrap();
    assert_eq!(p.read(IA32_PEBS_ENABLE), Ok(0x3_0000_0005));
    let mut s = Pmu::new(PmuCaps::SILVERMONT);
    assert_eq!(s.write(IA32_PEBS_ENABLE, 1), Err(Fault::Gp));
}

fn pebs_counter(reset_distance: u64) -> Pmu {
    let mut p = skl();
    p.write(IA32_A_PMC0 + 1, (1 << 48) - reset_distance).unwrap();
    p.write(IA32_PERFEVTSEL0 + 1, 0xC0 | OS | EN).unwrap();
    p.write(IA32_PEBS_ENABLE, 0b10).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 0b10).unwrap();
    p
}

#[test]
fn pebs_record_is_due_at_the_event_after_the_overflow() {
    let mut p = pebs_counter(3);
    assert!(p.pebs_active());
    for _ in 0..3 {
        p.retire(1, Retired::PLAIN, 0);
        assert!(!p.pebs_due(), "the overflowing instruction arms, it does not trigger");
    }
    assert_eq!(p.read(IA32_PMC0 + 1), Ok(0));
    assert_eq!(p.global_status() & 0b10, 0b10, "the overflow is visible in GLOBAL_STATUS");
    assert!(!p.take_pmi(), "no INT: no counter PMI");
    p.retire(1, Retired::PLAIN, 3);
    assert!(!p.pebs_due(), "an instruction the counter does not count (CPL 3, OS only) does not trigger");
    p.retire(1, Retired::PLAIN, 0);
    assert_eq!(p.take_pebs(), 0b10, "the applicable counters");
    assert_eq!(p.take_pebs(), 0);
    p.pebs_reload(1, 0xFFFF_FFFF_FFFD);
    assert_eq!(p.read(IA32_PMC0 + 1), Ok(0xFFFF_FFFF_FFFD), "reloaded from the DS reset field");
}

#[test]
fn a_cycles_pebs_record_due_in_user_mode_waits_while_the_kernel_runs() {
    // cycles:up as Linux programs it on parts without a cycles PEBS event: C0H with INV and
    // CMASK = 16 (counts core cycles), USR only, PEBS on PMC0.
    let mut p = skl();
    p.write(IA32_A_PMC0, (1 << 48) - 100).unwrap();
    p.write(IA32_PERFEVTSEL0, 0x1080_00C0 | USR | EN).unwrap();
    p.write(IA32_PEBS_ENABLE, 1).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 1).unwrap();
    p.cycles(150, 3); // past the overflow, in bulk: due
    assert!(p.pebs_due());
    assert!(!p.pebs_due_at(0), "a SYSCALL took the next block into the kernel: not there");
    assert!(p.pebs_due_at(3), "back in user mode");
    assert_eq!(p.take_pebs(), 1);
    // An instruction event's record is written where it falls, kernel entry included.
    let mut p = skl();
    p.write(IA32_A_PMC0, (1 << 48) - 2).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN).unwrap();
    p.write(IA32_PEBS_ENABLE, 1).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 1).unwrap();
    p.retire(3, Retired::PLAIN, 3);
    assert!(p.pebs_due_at(0) && p.pebs_due_at(3));
}

#[test]
fn pebs_within_asks_for_single_steps_only_where_a_record_can_fall() {
    let p = pebs_counter(10);
    assert!(!p.pebs_within(5, Some(Retired::PLAIN), 0), "no overflow in 6 instructions");
    assert!(p.pebs_within(10, Some(Retired::PLAIN), 0), "overflow at the 10th, record at the 11th");
    assert!(!p.pebs_within(10, Some(Retired::PLAIN), 3), "not counted at CPL 3");
    let mut p = pebs_counter(1);
    p.retire(1, Retired::PLAIN, 0);
    assert!(p.pebs_within(1, None, 0), "armed: the next instruction triggers");
    assert!(!p.pebs_within(0, Some(Retired::PLAIN), 0), "a block's last instruction: the next block start names it");
}

#[test]
fn pebs_in_bulk_triggers_when_events_follow_the_overflow() {
    let mut p = pebs_counter(2);
    p.retire(5, Retired::PLAIN, 0);
    assert_eq!(p.take_pebs(), 0b10);
}

#[test]
fn disabling_the_counter_disarms_pebs_and_the_buffer_threshold_raises_a_pmi() {
    let mut p = pebs_counter(1);
    p.retire(1, Retired::PLAIN, 0);
    p.write(IA32_PERF_GLOBAL_CTRL, 0).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 0b10).unwrap();
    p.retire(1, Retired::PLAIN, 0);
    assert!(!p.pebs_due());
    p.set_debugctl(1 << 12);
    p.set_ovf_buffer();
    assert!(p.take_pmi());
    assert_eq!(p.global_status(), 0b10 | STATUS_OVF_BUFFER | STATUS_CTR_FRZ);
}

fn icl() -> Pmu {
    Pmu::new(PmuCaps::ICELAKE)
}

#[test]
fn icelake_profile_enumerates_version_5_and_adaptive_pebs() {
    // Version 5, 8 x 48-bit GP counters, EBX length 7; ECX the fixed-counter bitmap (0-2),
    // EDX 3 x 48-bit fixed counters with [15] AnyThread deprecation.
    assert_eq!(PmuCaps::ICELAKE.cpuid_0a(), [0x0730_0805, 0x18, 0x7, 0x8603]);
    // FW_WRITE, PEBS_BASELINE, format 4, arch regs, trap-like, LBR format 5.
    assert_eq!(PmuCaps::ICELAKE.perf_capabilities(), Some(0x64C5));
    let none = PmuCaps { pebs_format: None, ..PmuCaps::ICELAKE };
    assert_eq!(none.perf_capabilities(), Some(0x2005), "without pebs=1 nothing of PEBS");
    assert_eq!(Pmu::new(none).read(MSR_PEBS_DATA_CFG), Err(Fault::Gp));
    // Skylake has no MSR_PEBS_DATA_CFG and no Adaptive_Record bits.
    let mut s = skl();
    assert_eq!(s.read(MSR_PEBS_DATA_CFG), Err(Fault::Gp));
    assert_eq!(s.write(IA32_PERFEVTSEL0, 0xC0 | EN | PerfEvtSel::ADAPTIVE), Err(Fault::Gp));
    assert_eq!(s.write(IA32_FIXED_CTR_CTRL, 1 << 32), Err(Fault::Gp));
}

#[test]
fn pebs_data_cfg_field_checks_and_read_back() {
    let mut p = icl();
    assert_eq!(p.read(MSR_PEBS_DATA_CFG), Ok(0));
    for bad in [1 << 4, 1 << 23, 1 << 32, 1 << 63] {
        assert_eq!(p.write(MSR_PEBS_DATA_CFG, bad), Err(Fault::Gp), "{bad:#x}");
    }
    p.write(MSR_PEBS_DATA_CFG, 0x1F00_000F).unwrap();
    assert_eq!(p.read(MSR_PEBS_DATA_CFG), Ok(0x1F00_000F));
    let c = p.pebs_data_cfg();
    assert!(c.mem_info() && c.gprs() && c.xmms() && c.lbrs());
    assert_eq!(c.lbr_entries_m1(), 31);
}

#[test]
fn baseline_pebs_enable_covers_gp_and_fixed_counters() {
    let mut p = icl();
    for bad in [1 << 8, 1 << 35, 1 << 63] {
        assert_eq!(p.write(IA32_PEBS_ENABLE, bad), Err(Fault::Gp), "{bad:#x}");
    }
    p.write(IA32_PEBS_ENABLE, 0x7_0000_00FF).unwrap();
    assert_eq!(p.read(IA32_PEBS_ENABLE), Ok(0x7_0000_00FF));
    // Adaptive_Record: PERFEVTSELx[34], FIXED_CTR_CTRL[32 + 4i] for i < 3.
    p.write(IA32_PERFEVTSEL0 + 7, 0xC0 | EN | PerfEvtSel::ADAPTIVE).unwrap();
    p.write(IA32_FIXED_CTR_CTRL, 0x333 | (1 << 32) | (1 << 36) | (1 << 40)).unwrap();
    assert_eq!(p.write(IA32_FIXED_CTR_CTRL, 1 << 44), Err(Fault::Gp));
}

#[test]
fn fixed_counter_0_pebs_arms_triggers_and_reloads() {
    // INST_RETIRED.ANY on fixed counter 0 with PEBS (Linux schedules `instructions:pp` there).
    let mut p = icl();
    p.write(IA32_FIXED_CTR0, (1 << 48) - 2).unwrap();
    p.write(IA32_FIXED_CTR_CTRL, 0b0001 | FixedCtrCtrl::adaptive_bit(0)).unwrap();
    p.write(IA32_PEBS_ENABLE, 1 << 32).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 1 << 32).unwrap();
    assert!(p.pebs_active());
    assert!(p.pebs_within(2, Some(Retired::PLAIN), 0), "overflow at the 2nd, record at the 3rd");
    p.retire(2, Retired::PLAIN, 0);
    assert!(!p.pebs_due());
    assert!(p.pebs_within(1, None, 0), "armed");
    p.retire(1, Retired::PLAIN, 0);
    let applicable = p.take_pebs();
    assert_eq!(applicable, 1 << 32);
    p.write(MSR_PEBS_DATA_CFG, 0b10).unwrap();
    assert_eq!(p.pebs_record_cfg(applicable), PebsDataCfg(0b10), "Adaptive_Record set: the groups");
    p.pebs_reload(32, (1 << 48) - 100);
    assert_eq!(p.read(IA32_FIXED_CTR0), Ok((1 << 48) - 100));
    // Without Adaptive_Record the record is basic.
    p.write(IA32_FIXED_CTR_CTRL, 0b0001).unwrap();
    assert_eq!(p.pebs_record_cfg(applicable), PebsDataCfg(0));
}

#[test]
fn without_baseline_bit_32_is_load_latency_not_fixed_pebs() {
    let mut p = skl();
    p.write(IA32_FIXED_CTR_CTRL, 0b0001).unwrap();
    p.write(IA32_PEBS_ENABLE, 1 << 32).unwrap(); // LL_EN_PMC0
    p.write(IA32_PERF_GLOBAL_CTRL, 1 << 32).unwrap();
    assert!(!p.pebs_active());
    assert_eq!(p.pebs_record_cfg(1), PebsDataCfg(0));
}

#[test]
fn nehalem_profile_enumerates_version_3_and_the_enhanced_pebs_record() {
    // Version 3, 4 x 48-bit GP counters, EBX length 7; EDX 3 x 48-bit fixed counters.
    assert_eq!(PmuCaps::NEHALEM.cpuid_0a(), [0x0730_0403, 0x18, 0, 0x603]);
    // Trap-like [6], arch regs [7], format 1 [11:8], no FW_WRITE, LBR format of the model's stack.
    assert_eq!(PmuCaps::NEHALEM.perf_capabilities(), Some(0x1C5));
    assert_eq!(PmuProfile::Nehalem.caps(false).perf_capabilities(), Some(0x5), "PDCM without pebs=1, no PEBS bits");
    assert_eq!(PmuCaps::NEHALEM.pebs_enable_bits(), Some(0xF_0000_000F), "PEBS_EN_PMC0-3, LL_EN_PMC0-3");
    let mut p = Pmu::new(PmuCaps::NEHALEM);
    assert_eq!(p.read(IA32_A_PMC0), Err(Fault::Gp), "no full-width writes before Sandy Bridge");
    assert_eq!(p.write(IA32_A_PMC0, 1), Err(Fault::Gp));
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS_SET), Err(Fault::Gp), "version 4 MSR");
    assert_eq!(p.read(MSR_PEBS_DATA_CFG), Err(Fault::Gp));
    // Legacy write: EAX sign-extended to 48 bits.
    p.write(IA32_PMC0 + 3, 0xFFFF_FFFE).unwrap();
    assert_eq!(p.read(IA32_PMC0 + 3), Ok(0xFFFF_FFFF_FFFE));
    // PEBS on PMC3: the overflow arms, the next event triggers, the counter reloads.
    p.write(IA32_PERFEVTSEL0 + 3, 0xC0 | OS | EN).unwrap();
    p.write(IA32_PEBS_ENABLE, 0b1000).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 0b1000).unwrap();
    p.retire(2, Retired::PLAIN, 0);
    assert!(!p.pebs_due());
    assert_eq!(p.global_status(), 0b1000);
    p.retire(1, Retired::PLAIN, 0);
    assert_eq!(p.take_pebs(), 0b1000);
    p.pebs_reload(3, 0xFFFF_FFFF_FFF0);
    assert_eq!(p.read(IA32_PMC0 + 3), Ok(0xFFFF_FFFF_FFF0));
}

#[test]
fn core2_profile_enumerates_version_2_and_pebs_on_pmc0_only() {
    // Version 2, 2 x 40-bit GP counters, EBX length 7; EDX 3 x 40-bit fixed counters (Penryn's
    // 07280202H / 503H; EBX: LLC references/misses unavailable, as every profile).
    assert_eq!(PmuCaps::CORE2.cpuid_0a(), [0x0728_0202, 0x18, 0, 0x503]);
    // Trap-like [6], arch regs [7], format 0 [11:8], no FW_WRITE, [5:0] LBR format 1 (64-bit
    // linear addresses) of the 4-entry stack at 40H/60H.
    assert_eq!(PmuCaps::CORE2.perf_capabilities(), Some(0xC1));
    assert_eq!(PmuProfile::Core2.caps(false).perf_capabilities(), Some(0x1), "PDCM without pebs=1, no PEBS bits");
    assert_eq!(PmuProfile::Core2.lbr_layout(), crate::lbr::LbrLayout::Core);
    assert_eq!(PmuProfile::Core2.caps(false).pebs_enable_bits(), None, "no IA32_PEBS_ENABLE without pebs=1");
    assert_eq!(PmuCaps::CORE2.pebs_enable_bits(), Some(1), "Enable PEBS on PMC0, nothing else");
    let mut p = Pmu::new(PmuCaps::CORE2);
    assert_eq!(p.write(IA32_PEBS_ENABLE, 0b10), Err(Fault::Gp), "no PEBS on PMC1");
    assert_eq!(p.write(IA32_PEBS_ENABLE, 1 << 32), Err(Fault::Gp), "no load latency facility");
    assert_eq!(p.read(IA32_PMC0 + 2), Err(Fault::Gp), "two GP counters");
    assert_eq!(p.write(IA32_PERFEVTSEL0, 0xC0 | OS | EN | (1 << 21)), Err(Fault::Gp), "AnyThread is version 3");
    assert_eq!(p.read(IA32_A_PMC0), Err(Fault::Gp));
    assert_eq!(p.read(IA32_PERF_GLOBAL_STATUS_SET), Err(Fault::Gp));
    // Legacy write: EAX sign-extended to 40 bits.
    p.write(IA32_PMC0, 0xFFFF_FFFE).unwrap();
    assert_eq!(p.read(IA32_PMC0), Ok(0xFF_FFFF_FFFE));
    // PEBS on PMC0: the overflow arms, the next event triggers, the counter reloads.
    p.write(IA32_PERFEVTSEL0, 0xC0 | OS | EN).unwrap();
    p.write(IA32_PEBS_ENABLE, 1).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 1).unwrap();
    p.retire(2, Retired::PLAIN, 0);
    assert!(!p.pebs_due());
    assert_eq!(p.global_status(), 1);
    p.retire(1, Retired::PLAIN, 0);
    assert_eq!(p.take_pebs(), 1);
    p.pebs_reload(0, 0xFF_FFFF_FFF0);
    assert_eq!(p.read(IA32_PMC0), Ok(0xFF_FFFF_FFF0));
    // PMC1 counts but never writes a record.
    p.write(IA32_PERFEVTSEL0 + 1, 0xC0 | OS | EN).unwrap();
    p.write(IA32_PMC0 + 1, 0xFFFF_FFFF).unwrap();
    p.write(IA32_PERF_GLOBAL_CTRL, 0b10).unwrap();
    p.retire(3, Retired::PLAIN, 0);
    assert_eq!(p.global_status() & 0b10, 0b10);
    assert!(!p.pebs_due());
}

#[test]
fn blocks_before_pmi_bounds_batches_so_that_no_interrupting_counter_overflows_inside_one() {
    let mut p = skl();
    // PMC0 counts instructions with INT, 1000 from overflow; PMC1 branches without INT, 0 away.
    p.write(IA32_A_PMC0, (1 << 48) - 1001).unwrap();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | OS | EN | INT).unwrap();
    p.write(IA32_A_PMC0 + 1, (1 << 48) - 1).unwrap();
    p.write(IA32_PERFEVTSEL0 + 1, 0xC4 | USR | OS | EN).unwrap();
    let n = p.blocks_before_pmi(512);
    assert_eq!(n, 1000 / 512);
    // That many blocks of the largest size retire without a PMI ...
    for _ in 0..n {
        assert!(!p.retire(511, Retired::PLAIN, 0));
        assert!(!p.retire(1, Retired::of(BranchKind::DirectJump { target: 0 }, 0, 2, 0), 0));
    }
    assert!(!p.pmi_within(0, None, 0));
    // ... (PMC1, without INT, overflowed silently) and the next one may overflow PMC0.
    assert_eq!(p.global_status(), 0b10);
    assert!(p.pmi_within(511, Some(Retired::PLAIN), 0));
}

#[test]
fn blocks_before_pmi_is_unbounded_without_int_and_bounded_by_pebs_and_near_cycle_counters() {
    let mut p = skl();
    p.write(IA32_PERFEVTSEL0, 0xC0 | USR | EN).unwrap();
    assert_eq!(p.blocks_before_pmi(512), u64::MAX, "no counter interrupts");
    // A cycle counter with INT: far from overflow (perf stat's start value), then close to it.
    p.write(IA32_A_PMC0 + 1, (1 << 48) - (1 << 47) + 1).unwrap();
    p.write(IA32_PERFEVTSEL0 + 1, 0x3C | USR | EN | INT).unwrap();
    assert_eq!(p.blocks_before_pmi(512), u64::MAX);
    p.write(IA32_A_PMC0 + 1, (1 << 48) - CYCLES_BATCH_MARGIN + 1).unwrap();
    assert_eq!(p.blocks_before_pmi(512), 0);
    p.write(IA32_PERFEVTSEL0 + 1, 0).unwrap();
    // PEBS on PMC0 (no INT): bounded by its distance to overflow like an interrupting counter;
    // once it overflowed, its record is armed (written at the next instruction): 0.
    p.write(IA32_A_PMC0, (1 << 48) - 5000).unwrap();
    p.write(IA32_PEBS_ENABLE, 1).unwrap();
    assert_eq!(p.blocks_before_pmi(512), 4999 / 512);
    p.retire(4999, Retired::PLAIN, 3);
    assert_eq!(p.blocks_before_pmi(512), 0, "one event from overflow");
    p.retire(1, Retired::PLAIN, 3);
    assert_eq!(p.read(IA32_PMC0), Ok(0));
    assert_eq!(p.blocks_before_pmi(512), 0, "overflowed: the PEBS record is armed");
}
