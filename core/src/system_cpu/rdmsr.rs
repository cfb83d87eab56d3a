//! RDMSR (SDM Vol. 2B "RDMSR"; the MSR map of SDM Vol. 4) in two steps around the emulator's own
//! execution of the instruction. Before it executes: the instructions before it retire when it
//! reads the PMU, and the model decides whether it answers the MSR, and whether the read raises
//! #GP(0) (an MSR the map gives to a unit that refuses the read, e.g. an IA32_RTIT_* register the
//! profile's CPUID.14H does not enumerate). After it executed, EDX:EAX are replaced with the
//! model's value: the unit's register for an MSR the model owns, and QEMU's IA32_MISC_ENABLE with
//! the BTS/PEBS-unavailable bits of the profile.

use super::{GuestPort, MsrInsn, Reg};
use crate::bts::debugctl::{misc_enable_read, IA32_MISC_ENABLE};
use crate::msr_map::{MsrMap, MsrUnit, MsrUnits};
use crate::pt::msr::Fault;

/// What an RDMSR about to execute does, decided before it executes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rdmsr {
    /// Not the model's MSR: QEMU's answer stands.
    Qemu,
    /// #GP(0) was raised (through [`GuestPort::raise_gp`]) instead of the read.
    Gp,
    /// QEMU executes the read; its EDX:EAX are then replaced ([`complete`]).
    Fixup(Fixup),
}

/// The EDX:EAX an executed RDMSR gets instead of QEMU's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fixup {
    /// An MSR the model owns: the unit's value at the read.
    Owned(u32),
    /// IA32_MISC_ENABLE (1A0H) on a part with the Debug Store: QEMU's value with bits [11] BTS
    /// Unavailable and [12] PEBS Unavailable as the profile has them.
    MiscEnable,
}

/// RDMSR of the MSR ECX selects, at `ip`, about to execute.
pub fn rdmsr<P: GuestPort>(port: &mut P, map: &MsrMap, ip: u64) -> Rdmsr {
    let rcx = port.reg(Reg::Rcx);
    let index = rcx as u32;
    let unit = map.unit(index);
    if unit == MsrUnit::Pmu {
        // The counters read include every instruction before the RDMSR.
        port.count_to(ip);
    }
    if unit == MsrUnit::Qemu {
        if index == IA32_MISC_ENABLE && map.bts {
            return Rdmsr::Fixup(Fixup::MiscEnable);
        }
        return Rdmsr::Qemu;
    }
    if read(port, map, index).is_err() {
        let rdx = port.reg(Reg::Rdx);
        port.raise_gp(MsrInsn::Rdmsr, rcx, rdx);
        return Rdmsr::Gp;
    }
    Rdmsr::Fixup(Fixup::Owned(index))
}

/// The RDMSR decided as `fixup` has executed: EDX:EAX get the model's value. Returns it, or None
/// when the registers were left as they are (a unit refusing the read now: the #GP(0) was
/// decided before the read and cannot be raised any more).
pub fn complete<P: GuestPort>(port: &mut P, map: &MsrMap, fixup: Fixup) -> Option<u64> {
    let value = match fixup {
        Fixup::MiscEnable => {
            let native = (port.reg(Reg::Rdx) << 32) | (port.reg(Reg::Rax) & 0xFFFF_FFFF);
            let pebs = port.cpu().pmu.caps().pebs_format.is_some();
            // The map's `bts`: CPUID.1:EDX[21] DS is enumerated, so BTS is available.
            misc_enable_read(native, true, pebs)
        }
        Fixup::Owned(index) => {
            // The output pointers and IA32_RTIT_STATUS show every byte generated so far.
            port.store_held();
            let cpu = port.cpu();
            cpu.msrs.read_back(cpu.tracer, cpu.output, &map.caps);
            read(port, map, index).ok()?
        }
    };
    port.set_reg(Reg::Rax, value & 0xFFFF_FFFF);
    port.set_reg(Reg::Rdx, value >> 32);
    Some(value)
}

/// The unit's answer to RDMSR of `index` (an index the map owns).
fn read<P: GuestPort>(port: &mut P, map: &MsrMap, index: u32) -> Result<u64, Fault> {
    let cpu = port.cpu();
    let units = MsrUnits { pmu: cpu.pmu, lbr: cpu.lbr, arch_lbr: cpu.arch_lbr, bts: cpu.bts, rtit: cpu.rtit.as_deref(), pt: cpu.msrs };
    units.rdmsr(map, index)
}
