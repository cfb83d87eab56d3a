//! 64-bit IDT gate descriptors (SDM Vol. 3A §6.14.1 Figure 6-8 "64-Bit IDT Gate Descriptors"),
//! for re-delivering an exception the emulator raised with the wrong vector: QEMU's TCG raises
//! #UD for RDPMC; when the PMU model says RDPMC faults (bad counter index, CR4.PCE = 0 at
//! CPL > 0), hardware raises #GP(0) instead.

/// An IDT gate of IA-32e mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate64 {
    pub offset: u64,
    pub selector: u16,
    /// Interrupt-stack-table index (0: none).
    pub ist: u8,
    /// Type (0xE interrupt gate: clears IF; 0xF trap gate) and P.
    pub gate_type: u8,
    pub present: bool,
}

impl Gate64 {
    pub fn parse(b: &[u8; 16]) -> Gate64 {
        let w = |i: usize| u64::from(u16::from_le_bytes([b[i], b[i + 1]]));
        let offset = w(0) | (w(6) << 16) | (u64::from(u32::from_le_bytes([b[8], b[9], b[10], b[11]])) << 32);
        Gate64 {
            offset,
            selector: w(2) as u16,
            ist: b[4] & 7,
            gate_type: b[5] & 0xF,
            present: b[5] & 0x80 != 0,
        }
    }

    /// An interrupt gate clears RFLAGS.IF on delivery; a trap gate leaves it.
    pub fn clears_if(&self) -> bool {
        self.gate_type == 0xE
    }
}

/// Can a #UD just delivered through `ud` be turned into #GP(0) through `gp` by pushing an error
/// code on the same stack? Both gates present, interrupt or trap gates, and the same IST (the
/// #UD frame then lies where the #GP frame must be).
pub fn ud_redeliverable_as_gp(ud: Gate64, gp: Gate64) -> bool {
    let ok = |g: Gate64| g.present && matches!(g.gate_type, 0xE | 0xF);
    ok(ud) && ok(gp) && ud.ist == gp.ist
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate(offset: u64, ist: u8, ty: u8) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..2].copy_from_slice(&(offset as u16).to_le_bytes());
        b[2..4].copy_from_slice(&0x10u16.to_le_bytes());
        b[4] = ist;
        b[5] = 0x80 | ty;
        b[6..8].copy_from_slice(&((offset >> 16) as u16).to_le_bytes());
        b[8..12].copy_from_slice(&((offset >> 32) as u32).to_le_bytes());
        b
    }

    #[test]
    fn gates_parse_and_same_stack_rule() {
        let ud = Gate64::parse(&gate(0xFFFF_FFFF_8100_1234, 0, 0xE));
        assert_eq!((ud.offset, ud.selector, ud.ist, ud.present), (0xFFFF_FFFF_8100_1234, 0x10, 0, true));
        assert!(ud.clears_if());
        let gp = Gate64::parse(&gate(0x10_2000, 0, 0xF));
        assert!(!gp.clears_if());
        assert!(ud_redeliverable_as_gp(ud, gp));
        assert!(!ud_redeliverable_as_gp(ud, Gate64::parse(&gate(0x10_2000, 1, 0xE))));
        assert!(!ud_redeliverable_as_gp(ud, Gate64::parse(&[0; 16])));
    }
}
