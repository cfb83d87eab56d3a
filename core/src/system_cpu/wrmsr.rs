//! WRMSR as the modelled CPU carries it out, called before the instruction executes: the MSR map
//! routes the index to its unit (`crate::msr_map`); a write the unit refuses raises #GP(0) and
//! changes nothing; an accepted one takes effect before the next instruction (SDM Vol. 3C §33.2.8
//! for IA32_RTIT_CTL.TraceEn, Vol. 3B §20.2 for the PMU). MSRs the model does not own are left to
//! the emulator.

use super::{lbr_recording, raise_topa_pmi, trace_config, GuestPort, MsrInsn, Reg};
use crate::msr_map::{MsrMap, MsrUnit, MsrUnitsMut, UnitWrite};
use crate::pt::enable::{self, EnableSite};
use crate::pt::msr::{Fault, WriteEffect, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS};

/// IA32_APIC_BASE (1BH): its base field locates the APIC page trace output must avoid.
pub const IA32_APIC_BASE: u32 = 0x1B;

/// What a WRMSR did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrmsr {
    /// Not the model's MSR: the emulator executes it.
    Qemu,
    /// #GP(0) was raised (through [`GuestPort::raise_gp`]); no unit changed.
    Gp,
    /// The PMU, an LBR unit or the Debug Store took the write. `context_refreshed`: counting,
    /// LBR recording or BTS started while Intel PT was not tracing, so the context the
    /// retirement events filter on (CPL, mode) was read from the guest.
    Unit { write: UnitWrite, context_refreshed: bool },
    /// Atom RTIT took the write.
    Rtit,
    /// Intel PT took the write, with this effect.
    Pt(WriteEffect),
}

/// WRMSR at `ip` (the next instruction at `nlip`) of EDX:EAX to the MSR ECX selects.
pub fn wrmsr<P: GuestPort>(port: &mut P, map: &MsrMap, ip: u64, nlip: u64) -> Wrmsr {
    // Packets this WRMSR generates carry the time it executes at.
    let tsc = port.guest_tsc();
    {
        let cpu = port.cpu();
        cpu.tracer.set_tsc(tsc);
        if let Some(r) = cpu.rtit {
            r.set_tsc(tsc);
        }
    }
    let rcx = port.reg(Reg::Rcx);
    let index = rcx as u32;
    if index == IA32_APIC_BASE {
        // §33.2.7.4: trace output never goes to the APIC page, wherever the guest moves it.
        let value = (port.reg(Reg::Rdx) << 32) | (port.reg(Reg::Rax) & 0xFFFF_FFFF);
        port.apic_base_written(value);
    }
    let unit = map.unit(index);
    if unit == MsrUnit::Qemu {
        return Wrmsr::Qemu;
    }
    // The trace MSRs show every byte generated before the WRMSR.
    port.store_held();
    let rdx = port.reg(Reg::Rdx);
    let value = (rdx << 32) | (port.reg(Reg::Rax) & 0xFFFF_FFFF);
    if unit == MsrUnit::Pmu {
        // The instructions before this WRMSR count under the old configuration; the WRMSR
        // itself retires under the new one (an enabling WRMSR counts, a disabling one not).
        port.count_to(ip);
    }
    match unit_write(port, map, unit, index, value) {
        Some(Err(Fault::Gp)) => {
            port.raise_gp(MsrInsn::Wrmsr, rcx, rdx);
            if unit == MsrUnit::Pmu {
                port.count_cycles();
            }
            Wrmsr::Gp
        }
        Some(Ok(effect)) => effect,
        None if unit == MsrUnit::Rtit && port.cpu().rtit.is_some() => rtit_write(port, index, value, ip, nlip, (rcx, rdx)),
        None => pt_write(port, map, index, value, ip, nlip, (rcx, rdx)),
    }
}

/// A write to the PMU, the LBRs or the Debug Store (None: another unit's MSR). The context the
/// counters, LBRs and BTS filter on is tracked by the retirement events while something sees
/// blocks; it is brought up to date when one of them starts.
fn unit_write<P: GuestPort>(port: &mut P, map: &MsrMap, unit: MsrUnit, index: u32, value: u64) -> Option<Result<Wrmsr, Fault>> {
    let cpu = port.cpu();
    let mut units = MsrUnitsMut { pmu: cpu.pmu, lbr: cpu.lbr, arch_lbr: cpu.arch_lbr, bts: cpu.bts };
    let write = match units.wrmsr(map, index, value) {
        Err(f) => return Some(Err(f)),
        Ok(UnitWrite::Other) => return None,
        Ok(w) => w,
    };
    let lbr_on = || lbr_recording(map.arch_lbr, map.rtit, cpu.bts, cpu.arch_lbr, cpu.pmu);
    let starts = match write {
        UnitWrite::Pmu { counting_started } => counting_started && !cpu.bts.active(),
        UnitWrite::Lbr | UnitWrite::Other => false,
        UnitWrite::ArchLbr => lbr_on(),
        UnitWrite::DebugStore { debugctl, bts_started } => debugctl && (bts_started || lbr_on()),
    };
    let context_refreshed = starts && !cpu.tracer.trace_en();
    if context_refreshed {
        let ctx = port.context();
        port.cpu().tracer.set_context(ctx);
    }
    if unit == MsrUnit::Pmu {
        port.count_cycles();
    }
    Some(Ok(Wrmsr::Unit { write, context_refreshed }))
}

/// A write to Atom RTIT's MSRs (seed 002): the context is read when the unit is not triggered
/// yet, a refused write raises #GP(0), and the output step follows either way.
fn rtit_write<P: GuestPort>(port: &mut P, index: u32, value: u64, ip: u64, nlip: u64, (rcx, rdx): (u64, u64)) -> Wrmsr {
    if port.cpu().rtit.is_some_and(|r| !r.trigger_en()) {
        let ctx = port.context();
        if let Some(r) = port.cpu().rtit {
            r.set_context(ctx);
        }
    }
    let cpu = port.cpu();
    let refused = match cpu.rtit {
        Some(r) => r.wrmsr(index, value, ip, nlip, cpu.mem).is_err(),
        None => false,
    };
    if refused {
        port.raise_gp(MsrInsn::Wrmsr, rcx, rdx);
    }
    port.drain();
    if refused {
        Wrmsr::Gp
    } else {
        Wrmsr::Rtit
    }
}

/// A write to Intel PT's IA32_RTIT_* registers: the register check (#GP(0) on reserved bits and
/// on writes TraceEn = 1 forbids, `pt::msr`), then the TraceEn 0 -> 1 and 1 -> 0 sequences
/// (`pt::enable`) or the output unit's new base and pointers.
fn pt_write<P: GuestPort>(port: &mut P, map: &MsrMap, index: u32, value: u64, ip: u64, nlip: u64, (rcx, rdx): (u64, u64)) -> Wrmsr {
    let caps = &map.caps;
    let cpu = port.cpu();
    // The check sees IA32_RTIT_STATUS and the output pointers as hardware shows them now.
    cpu.msrs.read_back(cpu.tracer, cpu.output, caps);
    let effect = match cpu.msrs.write(index, value, caps) {
        Err(Fault::Gp) => {
            port.raise_gp(MsrInsn::Wrmsr, rcx, rdx);
            return Wrmsr::Gp;
        }
        Ok(effect) => effect,
    };
    match effect {
        WriteEffect::TraceEnabled => {
            let cs_base = port.cs_base();
            let site = EnableSite {
                ip,
                nlip,
                ctx: port.context(),
                // CPUID.(14H,0):ECX[31] LIP = 0: IP payloads are offsets from the CS base
                // (SDM Vol. 3C §33.3.1.1 "Packet Decoding of RIP versus LIP").
                ip_base: if caps.lip { 0 } else { cs_base },
                // RFLAGS[9] IF.
                rflags_if: port.reg(Reg::Rflags) & (1 << 9) != 0,
            };
            let cpu = port.cpu();
            let cfg = trace_config(cpu.msrs, caps);
            let enabled = enable::trace_enabled(cpu.msrs, cpu.tracer, cpu.output, caps, cfg, site, cpu.mem);
            *cpu.output_active = enabled.output_active;
            port.drain();
            if enabled.topa_pmi {
                // STATUS.PendTopaPMI at the enable: the ToPA PMI is pended anew.
                raise_topa_pmi(port);
            }
        }
        WriteEffect::TraceDisabled => {
            // Everything buffered reaches memory before the WRMSR completes, so the guest reads
            // a complete stream and final pointers right after it.
            let cpu = port.cpu();
            enable::trace_disabling(cpu.msrs, cpu.tracer, ip, nlip);
            port.flush_output();
            let cpu = port.cpu();
            enable::trace_disabled_output(cpu.msrs, cpu.tracer, cpu.output, caps);
            *cpu.output_active = false;
        }
        WriteEffect::Plain => {
            match index {
                IA32_RTIT_OUTPUT_BASE => cpu.output.set_output_base(cpu.msrs.output_base),
                IA32_RTIT_OUTPUT_MASK_PTRS => cpu.output.set_output_mask_ptrs(cpu.msrs.output_mask_ptrs.value()),
                _ => {}
            }
            if !cpu.tracer.trace_en() {
                cpu.tracer.reconfigure(trace_config(cpu.msrs, caps));
            }
        }
    }
    Wrmsr::Pt(effect)
}
