//! RDPMC (SDM Vol. 2B "RDPMC"), which QEMU's TCG does not implement: it delivers #UD for it. The
//! facade undoes that delivery and completes the instruction from the PMU (EDX:EAX = the counter
//! ECX selects, execution resumes after it), or, where the PMU says RDPMC faults, turns the #UD
//! into the #GP(0) hardware raises. Called at the #UD's delivery, when the handler's stack holds
//! the interrupt frame.

use super::{GuestPort, Reg};
use crate::guest_mem::LinearMemory;
use crate::idt::{ud_redeliverable_as_gp, Gate64};
use crate::pmu::Pmu;
use crate::rflags::tcg_eflags_word;

/// What happened to the #UD QEMU delivered for an RDPMC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rdpmc {
    /// The instruction was completed from the PMU model; no exception.
    Completed,
    /// The PMU says #GP(0): re-delivered to the #GP handler at this address.
    Gp(u64),
    /// Left as QEMU delivered it.
    Unchanged,
}

/// The interrupt frame of an exception without error code (SDM Vol. 3A §6.14.2 Figure 6-9
/// "IA-32e Mode Stack Usage After Privilege Level Change"), from the handler's RSP up: RIP, CS,
/// RFLAGS, RSP, SS, 8 bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterruptFrame {
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

impl InterruptFrame {
    /// The frame at `rsp`, or None if a slot cannot be read.
    pub fn read(mem: &mut impl LinearMemory, rsp: u64) -> Option<InterruptFrame> {
        let mut slot = |i: u64| {
            let mut b = [0u8; 8];
            mem.read_linear(rsp.wrapping_add(8 * i), &mut b).ok().map(|()| u64::from_le_bytes(b))
        };
        Some(InterruptFrame { rip: slot(0)?, cs: slot(1)?, rflags: slot(2)?, rsp: slot(3)?, ss: slot(4)? })
    }
}

/// The registers that complete an RDPMC whose #UD delivery pushed `frame`: the interrupted
/// code's stack, RFLAGS (system part, `crate::rflags`), RIP after the RDPMC, and the counter's
/// value in EDX:EAX. `cs_ss`: the frame's CS and SS, when the delivery changed the privilege
/// level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub cs_ss: Option<(u64, u64)>,
    pub rsp: u64,
    pub eflags: u64,
    pub rip: u64,
    pub rax: u64,
    pub rdx: u64,
}

impl Completion {
    /// `cs_now`: CS at the handler (after the delivery); `resume`: the instruction after RDPMC.
    pub fn new(frame: &InterruptFrame, cs_now: u64, resume: u64, value: u64) -> Completion {
        Completion {
            cs_ss: (frame.cs & 3 != cs_now & 3).then_some((frame.cs, frame.ss)),
            rsp: frame.rsp,
            // The frame's status flags and DF are still TCG's lazy state (the delivery did not
            // change it); only the system flags go back into the EFLAGS word.
            eflags: tcg_eflags_word(frame.rflags),
            rip: resume,
            rax: value & 0xFFFF_FFFF,
            rdx: value >> 32,
        }
    }
}

/// RDPMC in the interrupted code (CPL = the frame's CS.RPL): the counter's value, or None for
/// the #GP(0) the PMU raises (an index it lacks; CR4.PCE = 0 at CPL > 0 in protected mode).
pub fn read_counter(pmu: &Pmu, ecx: u32, frame_cs: u64, cr0: u64, cr4: u64) -> Option<u64> {
    // CR4[8] PCE, CR0[0] PE.
    pmu.rdpmc(ecx, (frame_cs & 3) as u8, cr4 & (1 << 8) != 0, cr0 & 1 != 0).ok()
}

/// QEMU's helper_rdpmc raises #GP(0) itself for CR4.PCE = 0 at CPL > 0 in protected mode (before
/// its #UD): the exception delivered is already the hardware's.
pub fn qemu_raised_gp(frame_cs: u64, cr0: u64, cr4: u64) -> bool {
    cr0 & 1 != 0 && frame_cs & 3 != 0 && cr4 & (1 << 8) == 0
}

/// The #UD (vector 6) just delivered, re-delivered as #GP(0) (vector 13) on the same stack: the
/// error code 0 pushed below the frame, the #GP gate's CS and entry point, and IF as the gate
/// type leaves it (an interrupt gate clears it, a trap gate keeps the interrupted code's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpRedelivery {
    /// RSP with the error code pushed.
    pub rsp: u64,
    /// The #GP gate's selector, when it differs from the #UD handler's CS.
    pub cs: Option<u64>,
    pub eflags: u64,
    pub rip: u64,
}

impl GpRedelivery {
    /// `rsp`, `cs_now`, `eflags_now`: at the #UD handler; `saved_rflags`: the frame's RFLAGS.
    /// None when the two gates do not share a stack (`idt::ud_redeliverable_as_gp`).
    pub fn new(ud: Gate64, gp: Gate64, rsp: u64, cs_now: u64, eflags_now: u64, saved_rflags: u64) -> Option<GpRedelivery> {
        if !ud_redeliverable_as_gp(ud, gp) {
            return None;
        }
        // RFLAGS[9] IF.
        let if_flag = if gp.clears_if() { 0 } else { saved_rflags & (1 << 9) };
        Some(GpRedelivery {
            rsp: rsp.wrapping_sub(8),
            cs: (u64::from(gp.selector) != cs_now).then_some(u64::from(gp.selector)),
            eflags: (eflags_now & !(1 << 9)) | if_flag,
            rip: gp.offset,
        })
    }
}

/// QEMU has just delivered #UD for the RDPMC whose next instruction is at `resume`: complete it
/// from the PMU, re-deliver it as #GP(0), or leave it.
pub fn complete<P: GuestPort>(port: &mut P, resume: u64) -> Rdpmc {
    let rsp = port.reg(Reg::Rsp);
    let Some(frame) = InterruptFrame::read(port.linear(), rsp) else { return Rdpmc::Unchanged };
    let cr4 = port.reg(Reg::Cr4);
    let cr0 = port.reg(Reg::Cr0);
    if qemu_raised_gp(frame.cs, cr0, cr4) {
        return Rdpmc::Unchanged;
    }
    let ecx = port.reg(Reg::Rcx) as u32;
    let Some(value) = read_counter(port.cpu().pmu, ecx, frame.cs, cr0, cr4) else {
        return ud_to_gp(port, rsp, frame.rflags).map_or(Rdpmc::Unchanged, Rdpmc::Gp);
    };
    let c = Completion::new(&frame, port.reg(Reg::Cs), resume, value);
    if let Some((cs, ss)) = c.cs_ss {
        if !(port.set_reg(Reg::Cs, cs) && port.set_reg(Reg::Ss, ss)) {
            return Rdpmc::Unchanged;
        }
    }
    port.set_reg(Reg::Rsp, c.rsp);
    port.set_reg(Reg::Rflags, c.eflags);
    port.set_reg(Reg::Rip, c.rip);
    port.set_reg(Reg::Rax, c.rax);
    port.set_reg(Reg::Rdx, c.rdx);
    Rdpmc::Completed
}

/// #UD delivered for an RDPMC that raises #GP(0) on hardware: push the error code on the same
/// stack and enter the #GP handler instead (IA-32e mode, IA32_EFER[10] LMA = 1; gates 6 and 13
/// on the same stack). Returns the #GP handler's address.
fn ud_to_gp<P: GuestPort>(port: &mut P, rsp: u64, saved_rflags: u64) -> Option<u64> {
    if port.reg(Reg::Efer) & (1 << 10) == 0 {
        return None;
    }
    let idt = port.idt_base()?;
    let mut gate = |n: u64| {
        let mut b = [0u8; 16];
        port.linear().read_linear(idt.wrapping_add(16 * n), &mut b).ok().map(|()| Gate64::parse(&b))
    };
    let (ud, gp) = (gate(6)?, gate(13)?);
    let cs_now = port.reg(Reg::Cs);
    let eflags_now = port.reg(Reg::Rflags);
    let r = GpRedelivery::new(ud, gp, rsp, cs_now, eflags_now, saved_rflags)?;
    port.linear().write_linear(r.rsp, &0u64.to_le_bytes()).ok()?;
    port.set_reg(Reg::Rsp, r.rsp);
    if let Some(cs) = r.cs {
        port.set_reg(Reg::Cs, cs);
    }
    port.set_reg(Reg::Rflags, r.eflags);
    port.set_reg(Reg::Rip, r.rip);
    Some(r.rip)
}
