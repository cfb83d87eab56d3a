//! The TraceEn 0 -> 1 and 1 -> 0 sequences of the trace unit (`pt::enable`, SDM Vol. 3C §33.2.8,
//! §33.2.7.2): output started or refused, Stopped/Error blocking packets, PSB and PMI
//! preservation, PacketByteCnt kept across the disable.

use pttrace_core::guest_mem::SparseMemory;
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::enable::{trace_disabled_output, trace_disabling, trace_enabled, EnableSite, Enabled};
use pttrace_core::pt::msr::RtitMsrs;
use pttrace_core::pt::output::OutputUnit;
use pttrace_core::insn_class::BranchKind;
use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};

const SITE: EnableSite = EnableSite { ip: 0x400ffb, nlip: 0x401000, ctx: Context::USER64, ip_base: 0, rflags_if: true };

/// A user-mode configuration into a single range of 4 KiB at 10000H.
fn msrs() -> RtitMsrs {
    let mut m = RtitMsrs::default();
    m.ctl.set_user(true).set_branch_en(true).set_trace_en(true);
    m.output_base = 0x10000;
    m.output_mask_ptrs = pttrace_core::pt::msr::OutputMaskPtrs::new(0xFFF);
    m
}

fn enable(m: &mut RtitMsrs, caps: &PtCaps) -> (Tracer, OutputUnit, Enabled) {
    let mut t = Tracer::new(TraceConfig::default(), Context::USER64);
    let mut out = OutputUnit::new(*caps);
    let mut mem = SparseMemory::default();
    let cfg = TraceConfig { ctl: m.ctl, ..TraceConfig::default() };
    let e = trace_enabled(m, &mut t, &mut out, caps, cfg, SITE, &mut mem);
    (t, out, e)
}

#[test]
fn an_enable_starts_the_output_and_generates_the_psb_plus() {
    let caps = PtCaps::SKYLAKE;
    let mut m = msrs();
    let (mut t, out, e) = enable(&mut m, &caps);
    assert_eq!(e, Enabled { output_active: true, topa_pmi: false });
    assert!(t.trace_en());
    let bytes = t.take_output();
    assert_eq!(&bytes[..16], &[0x02, 0x82].repeat(8)[..], "PSB first");
    m.read_back(&t, &out, &caps);
    assert!(m.status.trigger_en());
}

#[test]
fn an_enable_with_stopped_or_error_set_generates_nothing() {
    let caps = PtCaps::SKYLAKE;
    for set in [|m: &mut RtitMsrs| { m.status.set_stopped(true); }, |m: &mut RtitMsrs| { m.status.set_error(true); }] {
        let mut m = msrs();
        set(&mut m);
        let (mut t, out, e) = enable(&mut m, &caps);
        assert!(!e.output_active);
        assert!(t.take_output().is_empty());
        m.read_back(&t, &out, &caps);
        assert!(!m.status.trigger_en(), "TriggerEn stays 0");
    }
}

#[test]
fn an_output_region_the_unit_refuses_sets_error() {
    let caps = PtCaps::SKYLAKE;
    let mut m = msrs();
    // ToPA with the table base beyond MAXPHYADDR (39 bits on this profile).
    m.ctl.set_topa(true);
    m.output_base = 1 << 45;
    let (mut t, _out, e) = enable(&mut m, &caps);
    assert!(!e.output_active);
    assert!(m.status.error());
    assert!(t.take_output().is_empty());
}

#[test]
fn pend_topa_pmi_is_pended_anew_and_pend_psb_cleared_only_with_inject_psb_pmi_on_enable() {
    let caps = PtCaps::SAPPHIRE_RAPIDS;
    let mut m = msrs();
    m.status.set_pend_topa_pmi(true).set_pend_psb(true);
    let (_, _, e) = enable(&mut m, &caps);
    assert!(!e.topa_pmi, "without InjectPsbPmiOnEnable both bits are ignored");
    assert!(m.status.pend_psb());
    let mut m = msrs();
    m.ctl.set_inject_psb_pmi_on_enable(true);
    m.status.set_pend_topa_pmi(true).set_pend_psb(true);
    let (_, _, e) = enable(&mut m, &caps);
    assert!(e.topa_pmi);
    assert!(!m.status.pend_psb(), "the enable inserted the PSB+ it kept");
    assert!(m.status.pend_topa_pmi(), "software clears PendTopaPMI");
}

#[test]
fn a_disable_keeps_packet_byte_cnt_and_the_next_enable_continues_from_it() {
    let caps = PtCaps::SKYLAKE;
    let mut m = msrs();
    let (mut t, mut out, _) = enable(&mut m, &caps);
    for i in 0..4 {
        t.branch(0x401000 + 0x100 * i, 0x401002 + 0x100 * i, BranchKind::IndirectJump, 0x401100 + 0x100 * i);
    }
    m.ctl.set_trace_en(false);
    trace_disabling(&mut m, &mut t, 0x401500, 0x401503);
    t.take_output();
    trace_disabled_output(&mut m, &t, &mut out, &caps);
    assert!(!m.status.trigger_en());
    let kept = m.status.packet_byte_cnt();
    assert!(kept > 0, "the TIPs after the PSB+ counted");
    assert_eq!(u64::from(kept), t.packet_byte_count());
    m.ctl.set_trace_en(true);
    let (t2, _, _) = enable(&mut m, &caps);
    assert!(t2.packet_byte_count() >= u64::from(kept), "the next enable continues from PacketByteCnt");
    let no_psb_cyc = PtCaps { psb_cyc: false, ..caps };
    let mut m = msrs();
    m.status.set_packet_byte_cnt(100);
    let (t3, _, _) = enable(&mut m, &no_psb_cyc);
    assert!(t3.packet_byte_count() < 100, "without configurable PSB the count starts at 0");
}

#[test]
fn a_topa_stop_region_that_fills_sets_stopped_raises_the_pmi_and_loses_the_rest() {
    use pttrace_core::guest_mem::GuestMemory;
    use pttrace_core::pt::enable::{store_packets, Stored};
    let caps = PtCaps::SKYLAKE;
    let mut mem = SparseMemory::new();
    mem.add_ram(0x20000, 0x1000);
    mem.add_ram(0x30000, 0x1000);
    // One 4 KiB region with INT = STOP = 1, then END back to the table (SDM §33.2.7.2).
    mem.write_u64(0x20000, 0x30000 | (1 << 4) | (1 << 2)).unwrap();
    mem.write_u64(0x20008, 0x20000 | 1).unwrap();
    let mut m = msrs();
    m.ctl.set_topa(true);
    m.output_base = 0x20000;
    m.output_mask_ptrs = pttrace_core::pt::msr::OutputMaskPtrs::new(0x7F);
    let mut t = Tracer::new(TraceConfig::default(), Context::USER64);
    let mut out = OutputUnit::new(caps);
    let cfg = TraceConfig { ctl: m.ctl, ..TraceConfig::default() };
    let e = trace_enabled(&mut m, &mut t, &mut out, &caps, cfg, SITE, &mut mem);
    assert!(e.output_active);
    for i in 0..2000u64 {
        t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x7f00_0000_0000 + 0x1_0001 * i);
    }
    let generated = t.output().len();
    assert!(generated > 4096);
    let mut mirrored = 0;
    let s = store_packets(&mut m, &mut t, &mut out, &mut mem, |b| mirrored = b.len());
    assert_eq!(s, Stored { written: 4096, lost: generated - 4096, topa_pmi: true, output_active: true });
    assert_eq!(mirrored, 4096);
    assert!(m.status.stopped() && !m.status.error());
    t.branch(0x401000, 0x401002, BranchKind::IndirectJump, 0x402000);
    assert!(t.output().is_empty(), "no packets after the STOP");
}
