//! What the delivery of an interrupt, an exception or an INT n tells Event Trace (SDM Vol. 3C
//! §33.2.4.4 "Event Trace"; CPUID.(14H,0):EBX[7], IA32_RTIT_CTL[31] EventEn): CFE(INTR) with the
//! vector, EVD(CR2) for a page fault, and RFLAGS.IF before and after the event. QEMU's
//! discontinuity callback reports the handler's address, not the vector: the vector is the IDT
//! gate pointing at the handler.

use super::{GuestPort, Reg};
use crate::guest_mem::LinearMemory;
use crate::idt::Gate64;

/// The vector whose present 64-bit IDT gate (SDM Vol. 3A §6.14.1) points at `handler`, from the
/// 256-entry table at `idt` (IDTR.base); the lowest one if several gates share the handler, None
/// when the table cannot be read whole.
pub fn idt_vector_of(mem: &mut impl LinearMemory, idt: u64, handler: u64) -> Option<u8> {
    let mut table = vec![0u8; 256 * 16];
    mem.read_linear(idt, &mut table).ok()?;
    (0..256usize).find_map(|n| {
        let g = Gate64::parse(table[n * 16..n * 16 + 16].try_into().ok()?);
        (g.present && g.offset == handler).then_some(n as u8)
    })
}

/// Vectors of the exceptions that push an error code (SDM Vol. 3A §6.15, Table 6-1): #DF, #TS,
/// #NP, #SS, #GP, #PF, #AC, #CP, #VC, #SX.
pub fn pushes_error_code(vector: u8) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

/// An event was just delivered to the handler at `handler` (the CPU is at its first instruction;
/// `exception`: an exception or INT n, announced before the delivery, rather than an external
/// interrupt). With TraceEn = 1 and EventEn = 1 the tracer gets, for its next asynchronous event:
/// the vector (CFE) and CR2 for #PF (vector 14), the interrupted code's RFLAGS.IF from the
/// 64-bit frame ([error code,] RIP, CS, RFLAGS, RSP, SS, §6.14.2; in IA-32e mode,
/// IA32_EFER[10] LMA = 1, only), and the handler's RFLAGS.IF (an interrupt gate cleared it).
/// Returns the vector, when a gate was found.
pub fn delivered<P: GuestPort>(port: &mut P, handler: u64, exception: bool) -> Option<u8> {
    let tracer = &*port.cpu().tracer;
    if !(tracer.trace_en() && tracer.event_en()) {
        return None;
    }
    let vector = match port.idt_base() {
        Some(idt) => idt_vector_of(port.linear(), idt, handler),
        None => None,
    };
    if let Some(vector) = vector {
        let cr2 = (vector == 14).then(|| port.reg(Reg::Cr2));
        port.cpu().tracer.cfe_interrupt(vector, cr2);
        // RFLAGS.IF before the event: what an IRET retired just before it restored (reported
        // with that IRET).
        if port.reg(Reg::Efer) & (1 << 10) != 0 {
            let err = exception && pushes_error_code(vector);
            let rflags_slot = port.reg(Reg::Rsp).wrapping_add(16 + if err { 8 } else { 0 });
            let mut b = [0u8; 8];
            if port.linear().read_linear(rflags_slot, &mut b).is_ok() {
                port.cpu().tracer.stage_if(u64::from_le_bytes(b) & (1 << 9) != 0);
            }
        }
    }
    // RFLAGS[9] IF in the handler.
    let if_flag = port.reg(Reg::Rflags) & (1 << 9) != 0;
    port.cpu().tracer.stage_event_if(if_flag);
    vector
}
