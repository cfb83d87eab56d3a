//! IA32_RTIT_STATUS and the output MSRs as RDMSR shows them while tracing and after it
//! (`RtitMsrs::read_back`, SDM Vol. 3C §33.2.7.4).

use pttrace_core::guest_mem::SparseMemory;
use pttrace_core::insn_class::BranchKind;
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::msr::RtitMsrs;
use pttrace_core::pt::output::OutputUnit;
use pttrace_core::pt::rtit_ctl::{AddrCfg, AddrRange, RtitCtl};
use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};

fn user_ctl() -> RtitCtl {
    let mut ctl = RtitCtl::default();
    ctl.set_user(true).set_branch_en(true);
    ctl
}

fn running_output(mem: &mut SparseMemory) -> OutputUnit {
    let mut u = OutputUnit::new(PtCaps::SKYLAKE);
    // Single range of 256 bytes at 10000H, write pointer 0.
    u.start(false, 0x10000, 0xFF, mem).unwrap();
    u
}

#[test]
fn trace_stop_shows_stopped_with_trigger_en_clear_and_stopped_stays_after_the_disable() {
    let mut ctl = user_ctl();
    ctl.set_addr_cfg(1, AddrCfg::TraceStop);
    let mut cfg = TraceConfig { ctl, ..TraceConfig::default() };
    cfg.addr[1] = AddrRange { a: 0x402000, b: 0x402fff };
    let mut t = Tracer::new(cfg, Context::USER64);
    let mut enabled = ctl;
    enabled.set_trace_en(true);
    t.write_ctl(0x400ffb, 0x401000, enabled);
    let mut mem = SparseMemory::default();
    let out = running_output(&mut mem);
    let mut msrs = RtitMsrs { ctl: enabled, ..RtitMsrs::default() };
    msrs.read_back(&t, &out, &PtCaps::SKYLAKE);
    assert!(msrs.status.trigger_en() && msrs.status.context_en() && msrs.status.filter_en());
    assert!(!msrs.status.stopped());
    let psb_plus = msrs.status.packet_byte_cnt();
    assert!(psb_plus > 0, "the PSB+ of the enable counts");
    assert_eq!((msrs.output_base, msrs.output_mask_ptrs.value()), (0x10000, 0xFF));

    t.branch(0x401000, 0x401005, BranchKind::DirectCall { target: 0x402000 }, 0x402000);
    t.branch(0x402000, 0x402002, BranchKind::IndirectJump, 0x401000);
    msrs.read_back(&t, &out, &PtCaps::SKYLAKE);
    assert!(msrs.status.stopped(), "TraceStop sets Stopped");
    assert!(!msrs.status.trigger_en() && !msrs.status.filter_en(), "and clears TriggerEn, FilterEn");
    assert!(msrs.status.packet_byte_cnt() > psb_plus);

    t.write_ctl(0x401000, 0x401003, ctl);
    msrs.status.set_packet_byte_cnt(7);
    msrs.read_back(&t, &out, &PtCaps::SKYLAKE);
    assert!(msrs.status.stopped(), "software owns Stopped once TraceEn = 0");
    assert!(!msrs.status.trigger_en());
    assert_eq!(msrs.status.packet_byte_cnt(), 7, "PacketByteCnt holds what software wrote");
}

#[test]
fn packet_byte_cnt_is_reserved_without_configurable_psb() {
    let mut enabled = user_ctl();
    enabled.set_trace_en(true);
    let mut t = Tracer::new(TraceConfig { ctl: user_ctl(), ..TraceConfig::default() }, Context::USER64);
    t.write_ctl(0x400ffb, 0x401000, enabled);
    let mut mem = SparseMemory::default();
    let out = running_output(&mut mem);
    let caps = PtCaps { psb_cyc: false, ..PtCaps::SKYLAKE };
    let mut msrs = RtitMsrs::default();
    msrs.read_back(&t, &out, &caps);
    assert!(msrs.status.trigger_en());
    assert_eq!(msrs.status.packet_byte_cnt(), 0);
}
