//! The code segment's base address (the hidden part of CS, SDM Vol. 3A §3.4.3), which the model
//! needs wherever an address it reports is not the one it has:
//! - QEMU reports a block's address and an event's source and destination as linear addresses
//!   (CS base + EIP) and RIP as the offset (EIP);
//! - Intel PT IP payloads, and the IP filter ranges compared with them, are offsets from the CS
//!   base when CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 (SDM Vol. 3C §33.3.1.1 "Packet Decoding of
//!   RIP versus LIP"); BTS records (seed 001 §6.6, SDM §18.4.8) and Atom RTIT payloads (seed 002)
//!   are linear addresses.
//!
//! The base is that of the descriptor cache: loaded with CS (far JMP/CALL/RET, IRET, an interrupt
//! or exception, SYSCALL/SYSRET) and kept as it is until the next load, whatever happens to the
//! GDT entry in memory or to CR0.PE in between (a protected-mode base stays in use in real mode
//! until a far transfer loads CS, SDM Vol. 3A §9.9.2). In 64-bit mode the base is treated as 0
//! (SDM Vol. 3A §3.2.4 "Segmentation in IA-32e Mode").

/// The base address field of a segment descriptor (SDM Vol. 3A §3.4.5 Figure 3-8: Base 15:00 in
/// bits 31:16, Base 23:16 in bits 39:32, Base 31:24 in bits 63:56).
pub const fn descriptor_base(desc: u64) -> u64 {
    ((desc >> 16) & 0xFF_FFFF) | (((desc >> 56) & 0xFF) << 24)
}

/// CS.L of a descriptor (bit 53).
pub const fn descriptor_l(desc: u64) -> bool {
    desc & (1 << 53) != 0
}

/// What is known when CS may just have been loaded (at the first block after a far transfer or
/// an event, or when nothing is known yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsLoad {
    /// The block's address as QEMU translated it (linear).
    pub translated_pc: u64,
    /// RIP at the block's entry (the offset in CS).
    pub rip: u64,
    /// CR0.PG = 0: a translation only runs at the linear address it was made for, so
    /// `translated_pc` is the block's linear address. With paging, x86 translations are
    /// PC-relative and may run at another linear address (by a multiple of the page size).
    pub translated_is_linear: bool,
    /// CR0.PE.
    pub pe: bool,
    /// IA32_EFER.LMA.
    pub lma: bool,
    /// The CS descriptor in the GDT the plugin tracks (None: unknown, an LDT selector, or not in
    /// RAM).
    pub descriptor: Option<u64>,
}

/// The CS base after a load. QEMU's own value where it is observable exactly: the block's linear
/// address minus RIP without paging (real mode included, whatever the selector says). With
/// paging the descriptor's base, when its page offset agrees with what QEMU ran (a GDT the plugin
/// tracks may not be the one CS was loaded from); otherwise the translated address minus RIP
/// (exact unless the translation was made at another linear address). 64-bit code: 0.
pub fn base_at_load(l: CsLoad) -> u64 {
    let observed = l.translated_pc.wrapping_sub(l.rip) & 0xFFFF_FFFF;
    if l.translated_is_linear {
        return observed;
    }
    match l.descriptor.filter(|_| l.pe) {
        Some(d) if l.lma && descriptor_l(d) => 0,
        Some(d) if (descriptor_base(d) ^ observed) & 0xFFF == 0 => descriptor_base(d),
        None if l.lma => 0,
        _ => observed,
    }
}

/// The CS base at an event's delivery: QEMU reports the handler's linear address (`to`, CS base
/// + EIP) and RIP holds its offset, with or without paging.
pub fn base_at_event(to: u64, rip: u64) -> u64 {
    to.wrapping_sub(rip) & 0xFFFF_FFFF
}

/// The CS base when nothing better is known (CS may have been loaded while the plugin saw no
/// blocks): real mode `selector << 4`, protected mode the descriptor's (0 in 64-bit code or
/// without a readable descriptor).
pub fn base_from_selector(selector: u64, pe: bool, lma: bool, descriptor: Option<u64>) -> u64 {
    if !pe {
        return (selector & 0xFFFF) << 4;
    }
    match descriptor {
        Some(d) if !(lma && descriptor_l(d)) => descriptor_base(d),
        _ => 0,
    }
}

/// The linear address of offset `ip` in a code segment with base `base`: 32-bit wrap-around
/// outside 64-bit code (a non-zero base is never used in 64-bit mode).
pub const fn linear(base: u64, ip: u64) -> u64 {
    if base == 0 {
        ip
    } else {
        ip.wrapping_add(base) & 0xFFFF_FFFF
    }
}

/// The offset of linear address `ip` in a code segment with base `base` (see `linear`).
pub const fn offset(base: u64, ip: u64) -> u64 {
    if base == 0 {
        ip
    } else {
        ip.wrapping_sub(base) & 0xFFFF_FFFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A code descriptor: base, limit 4 GiB, D or L.
    fn code(base: u32, d: bool, l: bool) -> u64 {
        let b = u64::from(base);
        0x008F_9A00_0000_FFFF
            | ((b & 0xFF_FFFF) << 16)
            | ((b >> 24) << 56)
            | (u64::from(d) << 54)
            | (u64::from(l) << 53)
    }

    #[test]
    fn descriptor_base_gathers_the_three_fields() {
        assert_eq!(descriptor_base(code(0x1234_5678, true, false)), 0x1234_5678);
        assert_eq!(descriptor_base(0x00CF_9A00_0000_FFFF), 0);
        assert_eq!(descriptor_base(code(0xFF00_0000, false, false)), 0xFF00_0000);
    }

    #[test]
    fn without_paging_the_base_is_what_qemu_ran_whatever_the_gdt_says() {
        // Far JMP to 18H (base F0000H): block at linear 10_1234, RIP 1_1234.
        let l = CsLoad {
            translated_pc: 0x10_1234,
            rip: 0x1_1234,
            translated_is_linear: true,
            pe: true,
            lma: false,
            descriptor: Some(code(0x1000, true, false)), // a stale or different GDT
        };
        assert_eq!(base_at_load(l), 0xF_0000);
        // Real mode still holding a protected-mode base (CR0.PE cleared, CS not reloaded).
        assert_eq!(base_at_load(CsLoad { pe: false, descriptor: None, ..l }), 0xF_0000);
        // 32-bit wrap: base FFFFF000H, EIP 2000H, linear 1000H.
        assert_eq!(base_at_load(CsLoad { translated_pc: 0x1000, rip: 0x2000, ..l }), 0xFFFF_F000);
    }

    #[test]
    fn with_paging_the_descriptor_base_when_its_page_offset_agrees() {
        // The translation was made at another linear address (same physical page mapped twice).
        let l = CsLoad {
            translated_pc: 0x40_5234 + 0x7000,
            rip: 0x40_5234 - 0x1230,
            translated_is_linear: false,
            pe: true,
            lma: false,
            descriptor: Some(code(0x1230, true, false)),
        };
        assert_eq!(base_at_load(l), 0x1230);
        // A descriptor whose base QEMU cannot have used: what QEMU ran.
        let other = CsLoad { descriptor: Some(code(0x2000, true, false)), ..l };
        assert_eq!(base_at_load(other), 0x8230);
        // No descriptor: what QEMU ran; in IA-32e mode 64-bit code (base 0).
        assert_eq!(base_at_load(CsLoad { descriptor: None, ..l }), 0x8230);
        assert_eq!(base_at_load(CsLoad { descriptor: None, lma: true, ..l }), 0);
        // 64-bit code segment: base ignored; compatibility mode: used.
        assert_eq!(base_at_load(CsLoad { lma: true, descriptor: Some(code(0x1230, false, true)), ..l }), 0);
        assert_eq!(base_at_load(CsLoad { lma: true, ..l }), 0x1230);
    }

    #[test]
    fn event_and_selector_rules() {
        assert_eq!(base_at_event(0x10_0040, 0x40), 0x10_0000);
        assert_eq!(base_from_selector(0x300, false, false, None), 0x3000);
        assert_eq!(base_from_selector(0x18, true, false, Some(code(0xF_0000, true, false))), 0xF_0000);
        assert_eq!(base_from_selector(0x18, true, true, Some(code(0xF_0000, false, true))), 0);
        assert_eq!(base_from_selector(0x18, true, false, None), 0);
    }

    #[test]
    fn linear_and_offset_wrap_at_4_gib_outside_64_bit_code() {
        assert_eq!(linear(0xFFFF_F000, 0x2000), 0x1000);
        assert_eq!(offset(0xFFFF_F000, 0x1000), 0x2000);
        assert_eq!(linear(0, 0xFFFF_8000_0000_1000), 0xFFFF_8000_0000_1000);
        assert_eq!(offset(0x3000, 0x3039), 0x39);
    }
}
