//! What the full-system plugin knows of the code segment register's descriptor cache (SDM Vol. 3A
//! §3.4.3, hidden part of CS) while it does not see every block: the instructions that load CS
//! without an event (far JMP, far CALL, far RET, IRET) are watched on their own then, so a mode
//! proven for a CS selector is dropped when CS is reloaded, even with the same selector value,
//! and the IA32_EFER.LMA value CS was loaded with is known.

use crate::insn_class::{kind_of_bytes, BranchKind, FarKind, ModeSet};
use crate::pt::packet::ExecMode;

/// The last load of CS the plugin saw (far transfer, event), with IA32_EFER.LMA at that time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CsLoad {
    lma: Option<bool>,
}

impl CsLoad {
    /// CS was loaded (a far transfer retired or an event was delivered) with `lma`.
    pub fn loaded(&mut self, lma: bool) {
        self.lma = Some(lma);
    }

    /// IA32_EFER.LMA at the last load of CS seen, if one was.
    pub fn lma_at_load(&self) -> Option<bool> {
        self.lma
    }

    /// The modes the cached CS allows among `consistent` with IA32_EFER.LMA = `lma` now. SDM
    /// Vol. 3A §10.8.5 (Initializing IA-32e Mode): MOV CR0 setting PG with EFER.LME = 1 sets
    /// LMA and leaves the processor in compatibility mode with the same CS; 64-bit mode starts
    /// only when CS is loaded (far JMP/CALL/RET, IRET, an event) from a descriptor with L = 1
    /// while LMA = 1. So code run with LMA = 1 while CS was last loaded with LMA = 0 is not
    /// 64-bit. The instruction boundaries are ground truth: a block that decodes only as 64-bit
    /// code keeps 64-bit (a load was missed).
    pub fn allowed(&self, consistent: ModeSet, lma: bool) -> ModeSet {
        if lma && self.lma == Some(false) {
            let without = ModeSet(consistent.0 & !ModeSet(0).with(ExecMode::Bit64).0);
            if without.0 != 0 {
                return without;
            }
        }
        consistent
    }
}

/// The instruction loads CS without an event: far JMP, far CALL (direct or through memory), far
/// RET, IRET (SDM Vol. 2A/2B). SYSCALL, SYSRET, SYSENTER and SYSEXIT load fixed descriptors
/// (64-bit code with LMA = 1 for SYSCALL) and are not counted: the plugin watches the loads
/// that can go to a descriptor of the guest's choosing.
pub fn loads_cs(bytes: &[u8]) -> bool {
    [16, 32, 64].into_iter().any(|bitness| {
        matches!(
            kind_of_bytes(bytes, bitness),
            Some(BranchKind::Far(FarKind::FarJmp | FarKind::FarCall | FarKind::FarRet | FarKind::Iret))
        )
    })
}

/// The modes in which an LGDT / LIDT (or another instruction whose operand the plugin decodes
/// when it executes) is decoded: the modes of its block when the plugin saw that block start
/// (`block_seen`: `block_modes` are the modes of the current block), otherwise only what its own
/// bytes tell (`insn_modes`): the block modes last seen belong to another block.
pub fn operand_modes(block_modes: ModeSet, insn_modes: ModeSet, block_seen: bool) -> ModeSet {
    if block_seen {
        let both = ModeSet(block_modes.0 & insn_modes.0);
        if both.0 != 0 {
            return both;
        }
    }
    insn_modes
}

/// Whether the mode the tracer holds after a CS load may be kept as the descriptor cache's
/// (`proven`): only when the plugin saw the load and the block right after it (`blind`: blocks
/// ran unseen since then, so the tracer's context was computed at an older event, e.g. a BIOS
/// interrupt in real mode, with stale knowledge).
pub fn may_establish(cs_loaded: bool, loaded_now: bool, blind: bool, pe: bool) -> bool {
    cs_loaded && loaded_now && !blind && pe
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::insn_class::{choose_mode, consistent_modes};
    use ExecMode::*;

    // tests/guest/lib/boot.S after `mov %eax, %cr0` (PG = 1, EFER.LME = 1): `lgdt gdt_ptr`, 32-bit
    // code (0F 01 15 disp32: absolute in 32-bit code, RIP-relative in 64-bit code).
    const LGDT_DISP32: &[u8] = &[0x0F, 0x01, 0x15, 0x50, 0x62, 0x10, 0x00];

    #[test]
    fn mov_cr0_enabling_paging_keeps_compatibility_mode_until_the_far_jump() {
        let lgdt = consistent_modes([LGDT_DISP32]);
        assert_eq!(lgdt, ModeSet(6), "one instruction: 32- and 64-bit alike");
        // CS = 8 loaded by QEMU's multiboot option ROM (`data32 ljmp`) with LMA = 0; the GDT
        // is in the ROM (not readable): without the load's LMA, LMA = 1 would say 64-bit.
        let mut cs = CsLoad::default();
        assert_eq!(choose_mode(None, cs.allowed(lgdt, true), true, true, None), Bit64);
        cs.loaded(false);
        assert_eq!(cs.allowed(lgdt, true), ModeSet(2));
        assert_eq!(choose_mode(None, cs.allowed(lgdt, true), true, true, None), Bit32);
        // With LMA = 0 nothing changes.
        assert_eq!(cs.allowed(lgdt, false), lgdt);
        // `ljmp $KERNEL_CS, $long_entry` loads CS with LMA = 1: 64-bit code from then on.
        cs.loaded(true);
        assert_eq!(cs.lma_at_load(), Some(true));
        assert_eq!(choose_mode(None, cs.allowed(lgdt, true), true, true, None), Bit64);
    }

    #[test]
    fn a_block_that_decodes_only_as_64bit_code_keeps_64bit_after_a_missed_load() {
        let mut cs = CsLoad::default();
        cs.loaded(false);
        let rex_mov: &[u8] = &[0x48, 0xB8, 1, 2, 3, 4, 5, 6, 7, 8]; // mov rax, imm64
        let only64 = consistent_modes([rex_mov]);
        assert_eq!(only64, ModeSet(4));
        assert_eq!(cs.allowed(only64, true), only64);
        assert_eq!(choose_mode(None, cs.allowed(only64, true), true, true, None), Bit64);
    }

    #[test]
    fn far_transfers_that_load_cs_are_found_in_every_mode() {
        assert!(loads_cs(&[0xEA, 0xDC, 0x00, 0x10, 0x00, 0x08, 0x00])); // ljmp $8, $0x1000dc (32-bit)
        assert!(loads_cs(&[0x66, 0x65, 0xFF, 0x2E, 0x34, 0x12])); // data32 ljmp *%gs:0x1234 (16-bit)
        assert!(loads_cs(&[0xFF, 0x18])); // lcall *(%rax)
        assert!(loads_cs(&[0xCB])); // lret
        assert!(loads_cs(&[0x48, 0xCF])); // iretq
        assert!(!loads_cs(&[0xE9, 0x00, 0x10, 0x00, 0x00]), "near jmp");
        assert!(!loads_cs(&[0xC3]), "near ret");
        assert!(!loads_cs(&[0x0F, 0x05]), "syscall: a fixed descriptor");
        assert!(!loads_cs(LGDT_DISP32));
    }

    #[test]
    fn lgdt_in_a_block_not_seen_is_decoded_by_its_own_bytes() {
        let own = consistent_modes([LGDT_DISP32]);
        // The last block seen was 16-bit option ROM code: its modes say nothing of this one.
        assert_eq!(operand_modes(ModeSet(1), own, false), own);
        // Seen: the block's modes narrow the instruction's.
        let block = ModeSet(2);
        assert_eq!(operand_modes(block, own, true), ModeSet(2));
        // Disjoint (cannot happen for the block's own instruction): the instruction's bytes.
        assert_eq!(operand_modes(ModeSet(1), own, true), own);
    }

    #[test]
    fn a_delivery_before_unseen_blocks_does_not_establish_the_cached_mode() {
        // A BIOS interrupt delivered in real mode, then blocks ran unseen up to a WRMSR block
        // in 32-bit protected mode: the tracer's mode (16-bit, from the delivery) is stale.
        assert!(!may_establish(true, true, true, true));
        // The far transfer and the block after it both seen: the mode chosen at the load holds.
        assert!(may_establish(true, true, false, true));
        // Real mode, no load, or a load not retired through the flow: nothing established.
        assert!(!may_establish(true, true, false, false));
        assert!(!may_establish(false, true, false, true));
        assert!(!may_establish(true, false, false, true));
    }
}
