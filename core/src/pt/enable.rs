//! The WRMSR that sets or clears IA32_RTIT_CTL.TraceEn, as the trace unit carries it out (SDM
//! Vol. 3C §33.2.8 "Enabling and Configuration MSRs", §33.2.7.2 output errors, Table 33-11;
//! seed 000 "PSB and PMI preservation"). Issue 13's per-CPU facade: the plugin supplies what it
//! learns from QEMU (the CPU's context at the WRMSR, guest memory) and does what only it can
//! (storing output, delivering the PMI); the sequence itself lives here.

use super::caps::PtCaps;
use super::msr::RtitMsrs;
use super::output::OutputUnit;
use super::tracer::{Context, TraceConfig, Tracer};
use crate::guest_mem::GuestMemory;

/// The CPU at the enabling WRMSR.
#[derive(Clone, Copy, Debug)]
pub struct EnableSite {
    /// The WRMSR's address and the next instruction's.
    pub ip: u64,
    pub nlip: u64,
    pub ctx: Context,
    /// The base IP payloads are offsets from (the CS base, or 0 with CPUID.(14H,0):ECX[31] LIP).
    pub ip_base: u64,
    /// RFLAGS.IF (Event Trace reports it from the PSB+ on).
    pub rflags_if: bool,
}

/// What the enable left for the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Enabled {
    /// The output unit accepted the configuration: packets reach memory.
    pub output_active: bool,
    /// PendTopaPMI was set with InjectPsbPmiOnEnable: the ToPA PMI is pended anew.
    pub topa_pmi: bool,
}

/// TraceEn 0 -> 1 (the MSR file already holds the new IA32_RTIT_CTL): configure the tracer, start
/// the output unit, and generate the enable's packets (PSB+ and what follows).
pub fn trace_enabled(
    msrs: &mut RtitMsrs,
    tracer: &mut Tracer,
    output: &mut OutputUnit,
    caps: &PtCaps,
    cfg: TraceConfig,
    site: EnableSite,
    mem: &mut impl GuestMemory,
) -> Enabled {
    tracer.set_ip_base(site.ip_base);
    tracer.set_context(site.ctx);
    tracer.reconfigure(cfg);
    if msrs.ctl.event_en() {
        // Event Trace: MODE.Exec carries RFLAGS.IF from the PSB+ on.
        tracer.set_if(site.rflags_if);
    }
    // Table 33-11, EBX[1] = 0: "a PSB is always generated" when TraceEn is set; with
    // configurable PSB the count continues from what IA32_RTIT_STATUS.PacketByteCnt holds.
    let restored = if caps.psb_cyc { msrs.status.packet_byte_cnt() } else { 0 };
    tracer.set_packet_byte_count(u64::from(restored));
    // PSB and PMI preservation (CPUID.(14H,0):EBX[6], InjectPsbPmiOnEnable).
    let (inject_psb, topa_pmi) = msrs.enable_injections();
    if inject_psb {
        tracer.inject_psb_at_enable();
    }
    let ctl = msrs.ctl;
    // With STATUS.Stopped or STATUS.Error already set, TriggerEn stays 0: no packets and no
    // output until software clears them (§33.2.7.2 ToPA errors, TraceStop).
    let blocked = msrs.status.stopped() || msrs.status.error();
    let output_active = !blocked
        && match output.start(ctl.topa(), msrs.output_base, msrs.output_mask_ptrs.value(), mem) {
            Ok(()) => true,
            Err(_) => {
                msrs.status.set_error(true);
                false
            }
        };
    tracer.write_ctl(site.ip, site.nlip, ctl);
    if !output_active {
        tracer.stop_without_packets();
        tracer.take_output();
    }
    Enabled { output_active, topa_pmi }
}

/// TraceEn 1 -> 0, the packets of the disable (the MSR file already holds the new
/// IA32_RTIT_CTL). The caller then stores everything generated (the guest reads a complete
/// stream and final pointers right after the WRMSR) and calls [`trace_disabled_output`].
pub fn trace_disabling(msrs: &mut RtitMsrs, tracer: &mut Tracer, ip: u64, nlip: u64) {
    tracer.write_ctl(ip, nlip, msrs.ctl);
    msrs.trace_disabled(tracer.psb_due());
}

/// After the disable's output was stored: the output unit stops, PacketByteCnt keeps the count
/// for the next enable, and the status reads back as hardware shows it.
pub fn trace_disabled_output(msrs: &mut RtitMsrs, tracer: &Tracer, output: &mut OutputUnit, caps: &PtCaps) {
    output.stop();
    if caps.psb_cyc {
        let count = tracer.packet_byte_count().min(u64::from(u32::MAX)) as u32;
        msrs.status.set_packet_byte_cnt(count);
    }
    msrs.read_back(tracer, output, caps);
}

/// What storing the generated packets left for the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    /// Bytes the output unit took (stored, or dropped at restricted memory, §33.2.7.4).
    pub written: usize,
    /// Bytes lost: the unit stopped or failed before taking them (hardware loses what is still
    /// in its internal buffers).
    pub lost: usize,
    /// A region with INT = 1 filled: the caller raises the ToPA PMI (§33.2.7.2).
    pub topa_pmi: bool,
    /// The output unit keeps running (false after an output error).
    pub output_active: bool,
}

/// The packets generated so far go through the output unit (§33.2.7): `mirror` sees the bytes
/// it took (the host copy); a ToPA STOP region that filled sets IA32_RTIT_STATUS.Stopped and an
/// output error sets Error, both ending packet generation (TriggerEn = 0).
pub fn store_packets(
    msrs: &mut RtitMsrs,
    tracer: &mut Tracer,
    output: &mut OutputUnit,
    mem: &mut impl GuestMemory,
    mirror: impl FnOnce(&[u8]),
) -> Stored {
    let bytes = tracer.output();
    let outcome = output.write(mem, bytes);
    let written = outcome.written.min(bytes.len());
    let lost = bytes.len() - written;
    mirror(&bytes[..written]);
    tracer.clear_output();
    if outcome.stopped {
        msrs.status.set_stopped(true);
        tracer.stop_without_packets();
    }
    let failed = outcome.error.is_some();
    if failed {
        msrs.status.set_error(true);
        tracer.stop_without_packets();
    }
    Stored { written, lost, topa_pmi: outcome.pmi, output_active: !failed }
}
