//! CPUID (SDM Vol. 2A "CPUID"): QEMU executes it with its own CPU model; afterwards EAX, EBX,
//! ECX and EDX that differ from the profile's answer (`crate::cpuid::CpuidProfile`, given QEMU's
//! registers as the native answer) are rewritten, before the next instruction runs.

use super::{GuestPort, Reg};
use crate::cpuid::CpuidProfile;

/// The result registers, in `CpuidProfile::answer`'s order.
const RESULT: [Reg; 4] = [Reg::Rax, Reg::Rbx, Reg::Rcx, Reg::Rdx];

/// The CPUID about to execute: its leaf (EAX) and subleaf (ECX).
pub fn leaf<P: GuestPort>(port: &mut P) -> (u32, u32) {
    (port.reg(Reg::Rax) as u32, port.reg(Reg::Rcx) as u32)
}

/// CPUID of (`leaf`, `subleaf`) has executed: the registers whose value differs from the
/// profile's answer are written (the others are left as QEMU set them). Returns the answer
/// {EAX, EBX, ECX, EDX}. The CPU remembers QEMU's own maximum basic leaf from a leaf 0.
pub fn complete<P: GuestPort>(port: &mut P, profile: &CpuidProfile, leaf: u32, subleaf: u32) -> [u32; 4] {
    let native = RESULT.map(|r| port.reg(r) as u32);
    let answer = profile.answer(leaf, subleaf, native, port.cpu().native_leaves);
    for ((reg, new), old) in RESULT.into_iter().zip(answer).zip(native) {
        if new != old {
            port.set_reg(reg, u64::from(new));
        }
    }
    answer
}
