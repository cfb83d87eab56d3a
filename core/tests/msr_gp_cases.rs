//! IA32_RTIT_* MSR file: one test per #GP case of the SDM, read-back as hardware does, the
//! Linux perf sequence, and a no-panic sweep over random WRMSR/RDMSR sequences.

use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::msr::*;
use pttrace_core::pt::rtit_ctl::RtitCtl;

const SKL: PtCaps = PtCaps::SKYLAKE;

// IA32_RTIT_CTL bits used below.
const TRACE_EN: u64 = 1 << 0;
const CYC_EN: u64 = 1 << 1;
const OS: u64 = 1 << 2;
const USER: u64 = 1 << 3;
const PWR_EVT_EN: u64 = 1 << 4;
const FUP_ON_PTW: u64 = 1 << 5;
const FABRIC_EN: u64 = 1 << 6;
const CR3_FILTER: u64 = 1 << 7;
const TOPA: u64 = 1 << 8;
const MTC_EN: u64 = 1 << 9;
const TSC_EN: u64 = 1 << 10;
const PTW_EN: u64 = 1 << 12;
const BRANCH_EN: u64 = 1 << 13;
const EVENT_EN: u64 = 1 << 31;
const DIS_TNT: u64 = 1 << 55;
const INJECT_PSB_PMI_ON_ENABLE: u64 = 1 << 56;

/// `perf record -e intel_pt//u` with no timing caps (shared/reference/linux-guest.md).
const PERF_USER_CTL: u64 = 0x2509;

fn mtc_freq(v: u64) -> u64 {
    v << 14
}
fn cyc_thresh(v: u64) -> u64 {
    v << 19
}
fn psb_freq(v: u64) -> u64 {
    v << 24
}
fn addr_cfg(n: u32, v: u64) -> u64 {
    v << (32 + 4 * n)
}

/// A profile with nothing beyond what every PT part has: ToPA only, no filtering, no timing.
fn bare() -> PtCaps {
    PtCaps::MINIMAL
}

/// Every capability a current part can enumerate, 4 ranges.
fn everything() -> PtCaps {
    PtCaps {
        ptwrite: true,
        power_events: true,
        psb_pmi_preserve: true,
        event_trace: true,
        dis_tnt: true,
        trace_transport: true,
        num_addr_ranges: 4,
        ..PtCaps::SKYLAKE
    }
}

/// CPUID.(EAX=07H,ECX=0):EBX[25] = 0: no output scheme at all.
fn no_pt() -> PtCaps {
    PtCaps {
        topa: false,
        single_range: false,
        trace_transport: false,
        ..bare()
    }
}

fn gp(m: &RtitMsrs, index: u32, value: u64, caps: &PtCaps) {
    assert_eq!(
        m.check_write(index, value, caps),
        Err(Fault::Gp),
        "WRMSR {index:#x} <- {value:#x} should #GP"
    );
    let mut copy = *m;
    assert_eq!(copy.write(index, value, caps), Err(Fault::Gp));
    assert_eq!(&copy, m, "a faulting WRMSR must not change state");
}

fn ok(m: &mut RtitMsrs, index: u32, value: u64, caps: &PtCaps) -> WriteEffect {
    assert_eq!(
        m.check_write(index, value, caps),
        Ok(()),
        "WRMSR {index:#x} <- {value:#x} should succeed"
    );
    m.write(index, value, caps).expect("accepted write")
}

fn tracing_skylake() -> RtitMsrs {
    let mut m = RtitMsrs::default();
    ok(&mut m, IA32_RTIT_OUTPUT_BASE, 0x1000_0000, &SKL);
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, PERF_USER_CTL, &SKL),
        WriteEffect::TraceEnabled
    );
    m
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_CTL: bits reserved for the profile
// ---------------------------------------------------------------------------------------------

#[test]
fn ctl_write_with_cyc_en_gps_without_psb_cyc_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, CYC_EN, &bare());
    assert_eq!(m.check_write(IA32_RTIT_CTL, CYC_EN, &SKL), Ok(()));
}

#[test]
fn ctl_write_with_cyc_thresh_gps_without_psb_cyc_capability() {
    gp(&RtitMsrs::default(), IA32_RTIT_CTL, cyc_thresh(1), &bare());
}

#[test]
fn ctl_write_with_psb_freq_gps_without_psb_cyc_capability() {
    gp(&RtitMsrs::default(), IA32_RTIT_CTL, psb_freq(1), &bare());
}

#[test]
fn ctl_write_with_mtc_en_gps_without_mtc_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, MTC_EN, &bare());
    assert_eq!(m.check_write(IA32_RTIT_CTL, MTC_EN, &SKL), Ok(()));
}

#[test]
fn ctl_write_with_mtc_freq_gps_without_mtc_capability() {
    gp(&RtitMsrs::default(), IA32_RTIT_CTL, mtc_freq(3), &bare());
}

#[test]
fn ctl_write_with_cr3_filter_gps_without_cr3_filter_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, CR3_FILTER, &bare());
    assert_eq!(m.check_write(IA32_RTIT_CTL, CR3_FILTER, &SKL), Ok(()));
}

#[test]
fn ctl_write_with_topa_gps_without_topa_capability() {
    let caps = PtCaps {
        topa: false,
        single_range: true,
        ..bare()
    };
    gp(&RtitMsrs::default(), IA32_RTIT_CTL, TOPA, &caps);
}

#[test]
fn trace_en_with_topa_gps_when_topa_is_not_supported() {
    let caps = PtCaps {
        topa: false,
        single_range: true,
        ..bare()
    };
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, TRACE_EN | TOPA | USER | BRANCH_EN, &caps);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, TRACE_EN | USER | BRANCH_EN, &caps),
        Ok(())
    );
}

#[test]
fn ctl_write_with_fabric_en_gps_without_trace_transport_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, FABRIC_EN, &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, FABRIC_EN, &everything()),
        Ok(())
    );
}

#[test]
fn ctl_write_with_ptw_en_gps_without_ptwrite_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, PTW_EN, &SKL);
    assert_eq!(m.check_write(IA32_RTIT_CTL, PTW_EN, &everything()), Ok(()));
}

#[test]
fn ctl_write_with_fup_on_ptw_gps_without_ptwrite_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, FUP_ON_PTW, &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, FUP_ON_PTW, &everything()),
        Ok(())
    );
}

#[test]
fn ctl_write_with_pwr_evt_en_gps_without_power_event_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, PWR_EVT_EN, &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, PWR_EVT_EN, &everything()),
        Ok(())
    );
}

#[test]
fn ctl_write_with_event_en_gps_without_event_trace_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, EVENT_EN, &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, EVENT_EN, &everything()),
        Ok(())
    );
}

#[test]
fn ctl_write_with_dis_tnt_gps_without_dis_tnt_capability() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, DIS_TNT, &SKL);
    assert_eq!(m.check_write(IA32_RTIT_CTL, DIS_TNT, &everything()), Ok(()));
}

#[test]
fn ctl_write_with_inject_psb_pmi_on_enable_gps_without_psb_pmi_preservation() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, INJECT_PSB_PMI_ON_ENABLE, &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, INJECT_PSB_PMI_ON_ENABLE, &everything()),
        Ok(())
    );
}

#[test]
fn addr2_cfg_gps_on_a_two_range_profile() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, addr_cfg(2, 1), &SKL);
    gp(&m, IA32_RTIT_CTL, addr_cfg(3, 2), &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, addr_cfg(0, 1) | addr_cfg(1, 2), &SKL),
        Ok(())
    );
}

#[test]
fn addr_cfg_gps_without_ip_filter_capability() {
    let caps = PtCaps {
        ip_filter: false,
        ..SKL
    };
    gp(&RtitMsrs::default(), IA32_RTIT_CTL, addr_cfg(0, 1), &caps);
}

#[test]
fn ctl_always_reserved_bits_gp_even_with_every_capability() {
    let m = RtitMsrs::default();
    for bit in [18u32, 23, 28, 29, 30, 48, 50, 54, 57, 60, 63] {
        gp(&m, IA32_RTIT_CTL, 1 << bit, &everything());
    }
    assert_eq!(
        CTL_ALWAYS_RESERVED & ctl_reserved_mask(&everything()),
        CTL_ALWAYS_RESERVED
    );
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_CTL: unsupported encodings
// ---------------------------------------------------------------------------------------------

#[test]
fn addr_cfg_encoding_3_gps() {
    let m = RtitMsrs::default();
    for v in 3..16 {
        gp(&m, IA32_RTIT_CTL, addr_cfg(0, v), &SKL);
        gp(&m, IA32_RTIT_CTL, addr_cfg(1, v), &SKL);
    }
}

#[test]
fn mtc_freq_outside_the_cpuid_bitmap_gps() {
    // SKYLAKE MTC bitmap 0x0249: encodings 0, 3, 6, 9.
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, MTC_EN | mtc_freq(1), &SKL);
    gp(&m, IA32_RTIT_CTL, mtc_freq(2), &SKL);
    for ok_enc in [0, 3, 6, 9] {
        assert_eq!(
            m.check_write(IA32_RTIT_CTL, MTC_EN | mtc_freq(ok_enc), &SKL),
            Ok(())
        );
    }
}

#[test]
fn cyc_thresh_outside_the_cpuid_bitmap_gps() {
    // SKYLAKE CycThresh bitmap 0x3FFF: 14 and 15 unsupported.
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, CYC_EN | cyc_thresh(14), &SKL);
    gp(&m, IA32_RTIT_CTL, cyc_thresh(15), &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, CYC_EN | cyc_thresh(13), &SKL),
        Ok(())
    );
}

#[test]
fn psb_freq_outside_the_cpuid_bitmap_gps() {
    // SKYLAKE PSBFreq bitmap 0x003F: 6..15 unsupported.
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, psb_freq(6), &SKL);
    gp(&m, IA32_RTIT_CTL, PERF_USER_CTL | psb_freq(15), &SKL);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, PERF_USER_CTL | psb_freq(5), &SKL),
        Ok(())
    );
}

#[test]
fn zero_encodings_are_checked_only_when_their_feature_is_on() {
    // A profile whose bitmaps lack encoding 0: CTL = 0 must still be writable, but enabling
    // the feature with encoding 0 uses an unsupported encoding.
    let caps = PtCaps {
        mtc_period_bitmap: 0x8,
        cyc_thresh_bitmap: 0x2,
        psb_freq_bitmap: 0x2,
        ..SKL
    };
    let m = RtitMsrs::default();
    assert_eq!(m.check_write(IA32_RTIT_CTL, 0, &caps), Ok(()));
    gp(&m, IA32_RTIT_CTL, MTC_EN, &caps);
    gp(&m, IA32_RTIT_CTL, CYC_EN, &caps);
    gp(&m, IA32_RTIT_CTL, PERF_USER_CTL, &caps);
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, PERF_USER_CTL | psb_freq(1), &caps),
        Ok(())
    );
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_CTL: TraceEn rules
// ---------------------------------------------------------------------------------------------

#[test]
fn changing_ctl_while_trace_en_gps() {
    let m = tracing_skylake();
    gp(&m, IA32_RTIT_CTL, PERF_USER_CTL | OS, &SKL);
    gp(&m, IA32_RTIT_CTL, PERF_USER_CTL & !BRANCH_EN, &SKL);
    gp(&m, IA32_RTIT_CTL, PERF_USER_CTL | addr_cfg(0, 1), &SKL);
}

#[test]
fn rewriting_the_same_ctl_while_trace_en_is_allowed() {
    let mut m = tracing_skylake();
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, PERF_USER_CTL, &SKL),
        WriteEffect::Plain
    );
    assert_eq!(m.ctl, RtitCtl(PERF_USER_CTL));
}

#[test]
fn clearing_trace_en_may_change_other_bits_in_the_same_write() {
    let mut m = tracing_skylake();
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, OS | BRANCH_EN | TOPA, &SKL),
        WriteEffect::TraceDisabled
    );
    assert_eq!(m.read(IA32_RTIT_CTL, &SKL), Ok(OS | BRANCH_EN | TOPA));
}

#[test]
fn clearing_trace_en_still_gps_on_reserved_bits() {
    let m = tracing_skylake();
    gp(&m, IA32_RTIT_CTL, 1 << 18, &SKL);
}

#[test]
fn trace_en_without_topa_gps_when_single_range_is_not_supported() {
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CTL, TRACE_EN | USER | BRANCH_EN, &bare());
    // Same write is fine with single-range output, or with FabricEn on a trace-transport part.
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, TRACE_EN | USER | BRANCH_EN, &SKL),
        Ok(())
    );
    let fabric = PtCaps {
        trace_transport: true,
        ..bare()
    };
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, TRACE_EN | FABRIC_EN | USER, &fabric),
        Ok(())
    );
    // Without TraceEn the output scheme is not checked.
    assert_eq!(
        m.check_write(IA32_RTIT_CTL, USER | BRANCH_EN, &bare()),
        Ok(())
    );
}

#[test]
fn trace_en_transitions_are_reported() {
    let mut m = RtitMsrs::default();
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, USER | TOPA, &SKL),
        WriteEffect::Plain
    );
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, USER | TOPA | TRACE_EN, &SKL),
        WriteEffect::TraceEnabled
    );
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, USER | TOPA, &SKL),
        WriteEffect::TraceDisabled
    );
    assert_eq!(ok(&mut m, IA32_RTIT_CTL, 0, &SKL), WriteEffect::Plain);
}

// ---------------------------------------------------------------------------------------------
// Writes to the other RTIT MSRs while TraceEn = 1
// ---------------------------------------------------------------------------------------------

#[test]
fn status_write_while_trace_en_gps() {
    gp(&tracing_skylake(), IA32_RTIT_STATUS, 0, &SKL);
}

#[test]
fn cr3_match_write_while_trace_en_gps() {
    gp(&tracing_skylake(), IA32_RTIT_CR3_MATCH, 0x1000, &SKL);
}

#[test]
fn output_base_write_while_trace_en_gps() {
    gp(&tracing_skylake(), IA32_RTIT_OUTPUT_BASE, 0x2000_0000, &SKL);
}

#[test]
fn output_mask_ptrs_write_while_trace_en_gps() {
    gp(&tracing_skylake(), IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F, &SKL);
}

#[test]
fn addr_write_while_trace_en_gps() {
    let m = tracing_skylake();
    gp(&m, IA32_RTIT_ADDR0_A, 0x40_0000, &SKL);
    gp(&m, IA32_RTIT_ADDR1_B, 0x40_0000, &SKL);
}

#[test]
fn reads_while_trace_en_are_allowed() {
    let m = tracing_skylake();
    assert_eq!(m.read(IA32_RTIT_CTL, &SKL), Ok(PERF_USER_CTL));
    assert_eq!(m.read(IA32_RTIT_OUTPUT_BASE, &SKL), Ok(0x1000_0000));
    assert_eq!(m.read(IA32_RTIT_STATUS, &SKL), Ok(0));
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_STATUS
// ---------------------------------------------------------------------------------------------

#[test]
fn status_reserved_bits_gp() {
    let m = RtitMsrs::default();
    for bit in [3u32, 8, 20, 31, 49, 55, 63] {
        gp(&m, IA32_RTIT_STATUS, 1 << bit, &everything());
    }
}

#[test]
fn status_pend_bits_gp_without_psb_pmi_preservation() {
    let mut m = RtitMsrs::default();
    gp(&m, IA32_RTIT_STATUS, RtitStatus::PEND_PSB, &SKL);
    gp(&m, IA32_RTIT_STATUS, RtitStatus::PEND_TOPA_PMI, &SKL);
    ok(
        &mut m,
        IA32_RTIT_STATUS,
        RtitStatus::PEND_PSB | RtitStatus::PEND_TOPA_PMI,
        &everything(),
    );
    assert!(m.status.pend_psb() && m.status.pend_topa_pmi());
}

#[test]
fn status_packet_byte_cnt_gps_without_psb_cyc_capability() {
    let mut m = RtitMsrs::default();
    gp(&m, IA32_RTIT_STATUS, 1 << 32, &bare());
    ok(&mut m, IA32_RTIT_STATUS, 0x1_FFFF << 32, &SKL);
    assert_eq!(m.status.packet_byte_cnt(), 0x1_FFFF);
}

#[test]
fn status_write_keeps_read_only_bits() {
    // FilterEn/ContextEn/TriggerEn are written by the processor; WRMSR ignores them (no #GP).
    let mut m = RtitMsrs::default();
    m.status.set_filter_en(true).set_context_en(true);
    ok(
        &mut m,
        IA32_RTIT_STATUS,
        RtitStatus::STOPPED | RtitStatus::TRIGGER_EN,
        &SKL,
    );
    assert_eq!(
        m.read(IA32_RTIT_STATUS, &SKL),
        Ok(RtitStatus::FILTER_EN | RtitStatus::CONTEXT_EN | RtitStatus::STOPPED)
    );
    ok(&mut m, IA32_RTIT_STATUS, 0, &SKL);
    assert_eq!(
        m.read(IA32_RTIT_STATUS, &SKL),
        Ok(RtitStatus::FILTER_EN | RtitStatus::CONTEXT_EN)
    );
}

#[test]
fn status_write_stores_error_and_stopped() {
    let mut m = RtitMsrs::default();
    ok(
        &mut m,
        IA32_RTIT_STATUS,
        RtitStatus::ERROR | RtitStatus::STOPPED | (5 << 32),
        &SKL,
    );
    assert!(m.status.error() && m.status.stopped());
    assert_eq!(m.status.packet_byte_cnt(), 5);
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_OUTPUT_BASE / IA32_RTIT_OUTPUT_MASK_PTRS
// ---------------------------------------------------------------------------------------------

#[test]
fn output_base_with_low_bits_gps() {
    let mut m = RtitMsrs::default();
    for low in [1u64, 0x40, 0x7F] {
        gp(&m, IA32_RTIT_OUTPUT_BASE, 0x1000_0000 | low, &SKL);
    }
    // Bits 11:7 of a ToPA base do not #GP (operational error at enable instead).
    ok(&mut m, IA32_RTIT_OUTPUT_BASE, 0x1000_0080, &SKL);
}

#[test]
fn output_base_at_or_above_maxphyaddr_gps() {
    let mut m = RtitMsrs::default();
    gp(&m, IA32_RTIT_OUTPUT_BASE, 1 << 39, &SKL);
    gp(&m, IA32_RTIT_OUTPUT_BASE, 1 << 63, &SKL);
    ok(&mut m, IA32_RTIT_OUTPUT_BASE, (1 << 39) - 0x80, &SKL);
    let wide = PtCaps {
        max_phys_addr: 46,
        ..SKL
    };
    ok(&mut m, IA32_RTIT_OUTPUT_BASE, 1 << 45, &wide);
}

#[test]
fn output_msrs_gp_without_topa_or_single_range() {
    let caps = PtCaps {
        topa: false,
        single_range: false,
        trace_transport: true,
        ..bare()
    };
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_OUTPUT_BASE, 0, &caps);
    gp(&m, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F, &caps);
    assert_eq!(m.read(IA32_RTIT_OUTPUT_BASE, &caps), Err(Fault::Gp));
    assert_eq!(m.read(IA32_RTIT_OUTPUT_MASK_PTRS, &caps), Err(Fault::Gp));
    assert!(!RtitMsrs::owns(IA32_RTIT_OUTPUT_BASE, &caps));
    assert!(RtitMsrs::owns(IA32_RTIT_CTL, &caps));
}

#[test]
fn mask_ptrs_low_bits_read_as_ones() {
    let mut m = RtitMsrs::default();
    ok(
        &mut m,
        IA32_RTIT_OUTPUT_MASK_PTRS,
        (0x123 << 32) | (5 << 7),
        &SKL,
    );
    assert_eq!(
        m.read(IA32_RTIT_OUTPUT_MASK_PTRS, &SKL),
        Ok((0x123 << 32) | (5 << 7) | 0x7F)
    );
    assert_eq!(m.output_mask_ptrs.mask_or_table_offset(), 5);
    assert_eq!(m.output_mask_ptrs.output_offset(), 0x123);
    ok(&mut m, IA32_RTIT_OUTPUT_MASK_PTRS, u64::MAX, &SKL);
    assert_eq!(m.read(IA32_RTIT_OUTPUT_MASK_PTRS, &SKL), Ok(u64::MAX));
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_CR3_MATCH
// ---------------------------------------------------------------------------------------------

#[test]
fn cr3_match_with_low_bits_gps() {
    let mut m = RtitMsrs::default();
    for low in [1u64, 0x10, 0x1F] {
        gp(&m, IA32_RTIT_CR3_MATCH, 0x1234_5000 | low, &SKL);
    }
    ok(&mut m, IA32_RTIT_CR3_MATCH, 0x1234_5020, &SKL);
    assert_eq!(m.read(IA32_RTIT_CR3_MATCH, &SKL), Ok(0x1234_5020));
}

#[test]
fn cr3_match_gps_without_cr3_filter_capability() {
    let caps = PtCaps {
        cr3_filter: false,
        ..SKL
    };
    let m = RtitMsrs::default();
    gp(&m, IA32_RTIT_CR3_MATCH, 0x1000, &caps);
    assert_eq!(m.read(IA32_RTIT_CR3_MATCH, &caps), Err(Fault::Gp));
    assert!(!RtitMsrs::owns(IA32_RTIT_CR3_MATCH, &caps));
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_ADDRn_A/B
// ---------------------------------------------------------------------------------------------

#[test]
fn addr2_gps_on_a_two_range_profile() {
    let m = RtitMsrs::default();
    for index in [
        IA32_RTIT_ADDR2_A,
        IA32_RTIT_ADDR2_B,
        IA32_RTIT_ADDR3_A,
        IA32_RTIT_ADDR3_B,
    ] {
        gp(&m, index, 0x40_0000, &SKL);
        assert_eq!(m.read(index, &SKL), Err(Fault::Gp));
        assert!(!RtitMsrs::owns(index, &SKL));
    }
    for index in [
        IA32_RTIT_ADDR0_A,
        IA32_RTIT_ADDR0_B,
        IA32_RTIT_ADDR1_A,
        IA32_RTIT_ADDR1_B,
    ] {
        assert!(RtitMsrs::owns(index, &SKL));
    }
}

#[test]
fn addr_non_canonical_gps() {
    let mut m = RtitMsrs::default();
    gp(&m, IA32_RTIT_ADDR0_A, 0x0000_8000_0000_0000, &SKL);
    gp(&m, IA32_RTIT_ADDR1_B, 0x1234_0000_0000_0000, &SKL);
    ok(&mut m, IA32_RTIT_ADDR0_A, 0xFFFF_8000_0000_1000, &SKL);
    ok(&mut m, IA32_RTIT_ADDR0_B, 0x0000_7FFF_FFFF_FFFF, &SKL);
}

#[test]
fn addr_reads_back_as_written() {
    let caps = everything();
    let mut m = RtitMsrs::default();
    for (k, index) in (IA32_RTIT_ADDR0_A..=IA32_RTIT_ADDR3_B).enumerate() {
        ok(&mut m, index, 0x40_0000 + k as u64 * 0x1000, &caps);
    }
    for (k, index) in (IA32_RTIT_ADDR0_A..=IA32_RTIT_ADDR3_B).enumerate() {
        assert_eq!(m.read(index, &caps), Ok(0x40_0000 + k as u64 * 0x1000));
    }
    assert_eq!(m.addr_ranges()[3].a, 0x40_6000);
    assert_eq!(m.addr_ranges()[3].b, 0x40_7000);
}

#[test]
fn addr_msrs_gp_without_ip_filter_capability() {
    let caps = PtCaps {
        ip_filter: false,
        ..SKL
    };
    gp(&RtitMsrs::default(), IA32_RTIT_ADDR0_A, 0, &caps);
    assert!(!RtitMsrs::owns(IA32_RTIT_ADDR0_A, &caps));
}

// ---------------------------------------------------------------------------------------------
// PT not enumerated
// ---------------------------------------------------------------------------------------------

#[test]
fn every_rtit_msr_gps_when_pt_is_not_enumerated() {
    let caps = no_pt();
    let m = RtitMsrs::default();
    let all = [
        IA32_RTIT_OUTPUT_BASE,
        IA32_RTIT_OUTPUT_MASK_PTRS,
        IA32_RTIT_CTL,
        IA32_RTIT_STATUS,
        IA32_RTIT_CR3_MATCH,
    ];
    for index in all.into_iter().chain(IA32_RTIT_ADDR0_A..=IA32_RTIT_ADDR3_B) {
        assert_eq!(m.read(index, &caps), Err(Fault::Gp), "RDMSR {index:#x}");
        gp(&m, index, 0, &caps);
        assert!(!RtitMsrs::owns(index, &caps));
    }
    assert!(!RtitMsrs::owns(IA32_PERF_GLOBAL_STATUS, &caps));
}

#[test]
fn indices_outside_the_file_gp_and_are_not_owned() {
    let m = RtitMsrs::default();
    for index in [0x10u32, 0x1D9, 0x38D, 0x38F, 0x562, 0x573, 0x588, 0x600] {
        assert!(!RtitMsrs::owns(index, &SKL));
        assert_eq!(m.read(index, &SKL), Err(Fault::Gp));
        gp(&m, index, 0, &SKL);
    }
}

// ---------------------------------------------------------------------------------------------
// IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI
// ---------------------------------------------------------------------------------------------

#[test]
fn topa_pmi_bit_is_set_read_and_cleared_through_the_global_status_msrs() {
    let mut m = RtitMsrs::default();
    assert!(RtitMsrs::owns(IA32_PERF_GLOBAL_STATUS, &SKL));
    m.set_topa_pmi();
    assert!(m.topa_pmi());
    assert_eq!(m.read(IA32_PERF_GLOBAL_STATUS, &SKL), Ok(1 << 55));
    // Linux's PMI handler acks with GLOBAL_OVF_CTRL; other bits are the PMU's business.
    ok(
        &mut m,
        IA32_PERF_GLOBAL_STATUS_RESET,
        (1 << 55) | 0b11 | (1 << 62),
        &SKL,
    );
    assert_eq!(m.read(IA32_PERF_GLOBAL_STATUS, &SKL), Ok(0));
    ok(&mut m, IA32_PERF_GLOBAL_STATUS_SET, 1 << 55, &SKL);
    assert_eq!(m.read(IA32_PERF_GLOBAL_STATUS, &SKL), Ok(1 << 55));
    // Writes without bit 55 leave it alone.
    ok(&mut m, IA32_PERF_GLOBAL_OVF_CTRL, 0b1, &SKL);
    assert!(m.topa_pmi());
}

#[test]
fn perf_global_status_is_read_only() {
    let mut m = RtitMsrs::default();
    m.set_topa_pmi();
    gp(&m, IA32_PERF_GLOBAL_STATUS, 0, &SKL);
    assert!(m.topa_pmi());
}

// ---------------------------------------------------------------------------------------------
// Linux perf sequence (shared/reference/linux-guest.md, arch/x86/events/intel/pt.c)
// ---------------------------------------------------------------------------------------------

#[test]
fn linux_perf_start_stop_sequence_succeeds_on_skylake() {
    assert_eq!(PERF_USER_CTL, TRACE_EN | USER | TOPA | TSC_EN | BRANCH_EN);
    let mut m = RtitMsrs::default();
    // pt_init reads CTL on every CPU: TraceEn must read 0.
    assert_eq!(m.read(IA32_RTIT_CTL, &SKL).map(|v| v & TRACE_EN), Ok(0));

    // Start: OUTPUT_BASE = ToPA table, MASK_PTRS = 0x7F | idx << 7 | off << 32, STATUS = 0, CTL.
    let topa_table = 0x0000_0001_2345_6000u64;
    let mask_ptrs = 0x7F | (2 << 7) | (0x340 << 32);
    assert_eq!(
        ok(&mut m, IA32_RTIT_OUTPUT_BASE, topa_table, &SKL),
        WriteEffect::Plain
    );
    assert_eq!(
        ok(&mut m, IA32_RTIT_OUTPUT_MASK_PTRS, mask_ptrs, &SKL),
        WriteEffect::Plain
    );
    assert_eq!(ok(&mut m, IA32_RTIT_STATUS, 0, &SKL), WriteEffect::Plain);
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, PERF_USER_CTL, &SKL),
        WriteEffect::TraceEnabled
    );

    // The output unit advances the pointers while tracing.
    m.output_mask_ptrs
        .set_mask_or_table_offset(3)
        .set_output_offset(0x10);
    m.status.set_packet_byte_cnt(0x200);

    // Stop: CTL with TraceEn = 0, then read where the trace ended.
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, 0, &SKL),
        WriteEffect::TraceDisabled
    );
    assert_eq!(m.read(IA32_RTIT_OUTPUT_BASE, &SKL), Ok(topa_table));
    assert_eq!(
        m.read(IA32_RTIT_OUTPUT_MASK_PTRS, &SKL),
        Ok(0x7F | (3 << 7) | (0x10 << 32))
    );
    assert_eq!(m.read(IA32_RTIT_STATUS, &SKL), Ok(0x200 << 32));

    // Restart with kernel tracing and perf's default timing config on this profile:
    // mtc_period=3, psb_period=3 (both in the SKYLAKE bitmaps).
    ok(&mut m, IA32_RTIT_STATUS, 0, &SKL);
    let uk = 0x250D | MTC_EN | mtc_freq(3) | psb_freq(3);
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, uk, &SKL),
        WriteEffect::TraceEnabled
    );
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, uk & !TRACE_EN, &SKL),
        WriteEffect::TraceDisabled
    );
}

#[test]
fn linux_ip_filter_sequence_succeeds_on_skylake() {
    let mut m = RtitMsrs::default();
    ok(&mut m, IA32_RTIT_OUTPUT_BASE, 0x8000_0000, &SKL);
    ok(&mut m, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F, &SKL);
    ok(&mut m, IA32_RTIT_STATUS, 0, &SKL);
    ok(&mut m, IA32_RTIT_ADDR0_A, 0x0040_1000, &SKL);
    ok(&mut m, IA32_RTIT_ADDR0_B, 0x0040_1FFF, &SKL);
    ok(&mut m, IA32_RTIT_ADDR1_A, 0xFFFF_FFFF_8100_0000, &SKL);
    ok(&mut m, IA32_RTIT_ADDR1_B, 0xFFFF_FFFF_8100_0FFF, &SKL);
    let ctl = PERF_USER_CTL | OS | addr_cfg(0, 1) | addr_cfg(1, 2);
    assert_eq!(
        ok(&mut m, IA32_RTIT_CTL, ctl, &SKL),
        WriteEffect::TraceEnabled
    );
    assert_eq!(m.addr_ranges()[1].a, 0xFFFF_FFFF_8100_0000);
}

// ---------------------------------------------------------------------------------------------
// No-panic sweep
// ---------------------------------------------------------------------------------------------

/// xorshift64* — enough randomness for a no-panic sweep, no extra crates.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

const INTERESTING: [u32; 20] = [
    IA32_RTIT_OUTPUT_BASE,
    IA32_RTIT_OUTPUT_MASK_PTRS,
    IA32_RTIT_CTL,
    IA32_RTIT_CTL,
    IA32_RTIT_CTL,
    IA32_RTIT_STATUS,
    IA32_RTIT_CR3_MATCH,
    IA32_RTIT_ADDR0_A,
    IA32_RTIT_ADDR0_B,
    IA32_RTIT_ADDR1_A,
    IA32_RTIT_ADDR1_B,
    IA32_RTIT_ADDR2_A,
    IA32_RTIT_ADDR2_B,
    IA32_RTIT_ADDR3_A,
    IA32_RTIT_ADDR3_B,
    IA32_PERF_GLOBAL_STATUS,
    IA32_PERF_GLOBAL_STATUS_RESET,
    IA32_PERF_GLOBAL_STATUS_SET,
    0x562,
    0x588,
];

/// Values biased towards ones that pass some checks: small, masked by a profile, or raw.
fn value(r: &mut XorShift, caps: &PtCaps) -> u64 {
    let v = r.next();
    match r.next() % 7 {
        0 => v,
        1 => v & !ctl_reserved_mask(caps),
        2 => v & 0xFFFF,
        3 => (v & !ctl_reserved_mask(caps)) | 1,
        4 => v & 0x0000_7FFF_FFFF_FF80,
        // Single-bit CTL flags only (no multi-bit fields): often a valid CTL.
        5 => v & 0x3FFF & !ctl_reserved_mask(caps),
        _ => 0,
    }
}

#[test]
fn random_msr_sequences_never_panic_and_keep_invariants() {
    let profiles = [
        SKL,
        bare(),
        everything(),
        no_pt(),
        PtCaps {
            single_range: false,
            ..SKL
        },
    ];
    let mut r = XorShift(0x9E37_79B9_7F4A_7C15);
    for caps in &profiles {
        let reserved = ctl_reserved_mask(caps);
        let mut m = RtitMsrs::default();
        let mut enables = 0;
        for _ in 0..20_000 {
            let index = if r.next().is_multiple_of(16) {
                r.next() as u32
            } else {
                INTERESTING[(r.next() % 20) as usize]
            };
            let v = value(&mut r, caps);
            if r.next().is_multiple_of(3) {
                let _ = m.read(index, caps);
                continue;
            }
            let before = m;
            let checked = m.check_write(index, v, caps);
            assert_eq!(m, before, "check_write is pure");
            match m.write(index, v, caps) {
                Ok(effect) => {
                    assert_eq!(checked, Ok(()));
                    let was = before.ctl.trace_en();
                    let now = m.ctl.trace_en();
                    match effect {
                        WriteEffect::TraceEnabled => {
                            assert!(!was && now);
                            enables += 1;
                        }
                        WriteEffect::TraceDisabled => assert!(was && !now),
                        WriteEffect::Plain => assert_eq!(was, now),
                    }
                    if index != IA32_RTIT_CTL && is_rtit_index(index) {
                        assert!(!was, "non-CTL RTIT writes only succeed with TraceEn = 0");
                    }
                }
                Err(Fault::Gp) => {
                    assert_eq!(checked, Err(Fault::Gp));
                    assert_eq!(m, before, "a faulting write changes nothing");
                }
            }
            // Invariants of accepted state.
            assert_eq!(m.ctl.0 & reserved, 0);
            assert_eq!(m.output_base & 0x7F, 0);
            assert_eq!(m.cr3_match & 0x1F, 0);
            assert_eq!(m.status.0 & RtitStatus::ALWAYS_RESERVED, 0);
            if let Ok(p) = m.read(IA32_RTIT_OUTPUT_MASK_PTRS, caps) {
                assert_eq!(p & 0x7F, 0x7F);
            }
            // Occasionally let the "hardware" move state as the tracer would.
            if r.next().is_multiple_of(50) {
                m.set_topa_pmi();
                m.status.set_stopped(r.next() & 1 == 1);
            }
        }
        // The sweep must reach the traced state on every profile that can trace.
        assert_eq!(
            enables == 0,
            !pt_enumerated(caps),
            "{enables} enables on {caps:?}"
        );
    }
}
