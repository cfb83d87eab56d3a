//! Real Time Instruction Trace (RTIT) of the Silvermont and Airmont Intel Atom cores, as the
//! "Real Time Instruction Trace Programming Reference v1.05" (December 2015, seed 002) defines it.
//!
//! RTIT is the model-specific predecessor of Intel PT: its own MSRs at 760H-77DH (§3.3), its own
//! packet format (FUP/TIP with 16-bit-chunk LIP compression, 1-byte TNT, 9-byte PSB; §4), and a
//! single circular output region in physical memory (§2.3). Nothing is shared with the PT wire
//! format; the tracer is driven by the same retirement events as `crate::pt::tracer::Tracer`.
//!
//! - [`msr`]: the RTIT MSR file, typed registers, reserved-bit and read-RTIT_CTL-first #GP rules.
//! - [`packet`], [`encode`], [`lip`]: packets as values, their bytes, Table 18 LIP compression.
//! - [`tracer`]: enable logic, filtering, Table 19, timing packets, buffer overflow.
//! - [`output`]: the circular region in guest-physical memory.
//! - [`decode`]: packet parser, packet printer and flow reconstruction from a code image.
//! - [`errata`]: Appendix E, and the option that reproduces selected errata.
//! - [`steady`]: runs of recorded user-mode blocks in the steady state, with the tracer's
//!   bookkeeping in registers (issue 13).
//! - [`setup`]: programming the MSRs for a trace whose output is a host byte stream (user mode).

pub mod decode;
pub mod encode;
pub mod errata;
pub mod lip;
pub mod msr;
pub mod output;
pub mod packet;
pub mod setup;
pub mod steady;
pub mod tracer;

pub use tracer::{RtitOptions, RtitTracer};

/// A processor that implements RTIT (§1.2): CPUID family/model/stepping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitProfile {
    pub name: &'static str,
    /// CPUID.01H:EAX display family.
    pub family: u8,
    /// CPUID.01H:EAX display model.
    pub model: u8,
    pub stepping: u8,
}

impl RtitProfile {
    /// CPUID.01H:EAX for this family/model/stepping (extended model in bits 19:16, family 6 has
    /// no extended family).
    pub const fn cpuid_01_eax(self) -> u32 {
        ((self.model as u32 >> 4) << 16) | ((self.family as u32) << 8) | ((self.model as u32 & 0xF) << 4)
            | (self.stepping as u32 & 0xF)
    }
}

/// Silvermont (Avoton/Rangeley server SoC): family 6, model 4DH, stepping 8 (§1.2).
pub const SILVERMONT: RtitProfile = RtitProfile { name: "Silvermont", family: 6, model: 0x4D, stepping: 8 };

/// Every family/model/stepping §1.2 lists: Silvermont 6/37/8, 6/5D/0, 6/5D/1, 6/4A/8, 6/4D/8,
/// 6/5A/0; Airmont 6/4C/3. "RTIT is not architectural and is therefore not enumerated in any
/// way" (§3.1): software identifies it by these values.
pub const SUPPORTED: [RtitProfile; 7] = [
    RtitProfile { name: "Silvermont", family: 6, model: 0x37, stepping: 8 },
    RtitProfile { name: "Silvermont", family: 6, model: 0x5D, stepping: 0 },
    RtitProfile { name: "Silvermont", family: 6, model: 0x5D, stepping: 1 },
    RtitProfile { name: "Silvermont", family: 6, model: 0x4A, stepping: 8 },
    SILVERMONT,
    RtitProfile { name: "Silvermont", family: 6, model: 0x5A, stepping: 0 },
    RtitProfile { name: "Airmont", family: 6, model: 0x4C, stepping: 3 },
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silvermont_cpuid_signature() {
        assert_eq!(SILVERMONT.cpuid_01_eax(), 0x0004_06D8);
        assert!(SUPPORTED.contains(&SILVERMONT));
    }
}
