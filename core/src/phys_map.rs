//! Which guest-physical addresses are RAM (issue 12): trace output, ToPA tables and Debug Store
//! records may only ever touch RAM.
//!
//! SDM Vol. 3C §33.2.7.4 "Restricted Memory Access" (seed 000): packet output must not be routed
//! to the 4 KiB local APIC MMIO page defined by IA32_APIC_BASE, and such stores generate no error;
//! Table 33-5 leaves other non-RAM targets (MMIO, ROM) implementation-dependent (see
//! `pt::output`). In an emulator a store or read that reaches a device model has side effects
//! (QEMU's `address_space_rw`, behind the plugin API's hwaddr accessors, dispatches to MMIO: a
//! ToPA region on the APIC page rewrote the APIC's registers and reset the CPU). So the plugin
//! decides RAM itself, before any access, from the machine's RAM layout:
//!
//! - QEMU's PC machines place guest RAM at [0, below_4g) and [4 GiB, 4 GiB + above_4g); the split
//!   follows hw/i386/pc_piix.c (`pc`: 3.5 GiB, or 3 GiB when the RAM does not fit below
//!   max-ram-below-4g, gigabyte-aligned) and hw/i386/pc_q35.c (`q35`: 2.75 GiB, or 2 GiB from
//!   2.75 GiB of RAM on; capped by max-ram-below-4g).
//! - [A0000H, 100000H) is the legacy VGA window and the BIOS/option-ROM area (MMIO or ROM,
//!   depending on PAM programming): never RAM here.
//! - The local APIC page at IA32_APIC_BASE (wherever the guest moves it; in xAPIC and x2APIC
//!   mode alike) and the page where QEMU maps its APIC MMIO (FEE00000H, which QEMU does not move)
//!   are excluded from RAM.
//!
//! The RAM size and machine type come from QEMU's command line (`-m`, `-machine`/`-M`): the plugin
//! API has no query for the memory map. Memory hot-plugged into device memory is not RAM here.

use std::ops::Range;

/// QEMU's default RAM size for x86 machines (`-m` absent): 128 MiB.
pub const DEFAULT_RAM: u64 = 128 << 20;
/// Where QEMU maps the local APIC's MMIO region (APIC_DEFAULT_ADDRESS), and IA32_APIC_BASE's
/// reset value of the base field.
pub const APIC_DEFAULT_BASE: u64 = 0xFEE0_0000;
/// IA32_APIC_BASE[MAXPHYADDR-1:12] APIC Base (SDM Vol. 3A §11.4.4).
pub const APIC_BASE_MASK: u64 = 0x000F_FFFF_FFFF_F000;
/// The legacy VGA window and BIOS area: [A0000H, 100000H).
const LEGACY_HOLE: Range<u64> = 0xA_0000..0x10_0000;
const GIB: u64 = 1 << 30;

/// The PC machine families whose RAM layout the map knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `pc`, `pc-i440fx-*` (QEMU's default for qemu-system-x86_64).
    I440fx,
    /// `q35`, `pc-q35-*`.
    Q35,
}

/// Guest RAM of a PC machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhysMap {
    ram: Vec<Range<u64>>,
}

impl PhysMap {
    /// The RAM of `machine` with `ram_size` bytes (`max_below_4g`: the machine's
    /// max-ram-below-4g property, if given).
    pub fn pc(machine: Machine, ram_size: u64, max_below_4g: Option<u64>) -> PhysMap {
        let below = match machine {
            Machine::I440fx => {
                let mut lowmem = max_below_4g.filter(|&m| m != 0).unwrap_or(0xE000_0000);
                // pc_piix.c: gigabyte_align (every current machine version).
                if ram_size >= lowmem && lowmem > 0xC000_0000 {
                    lowmem = 0xC000_0000;
                }
                ram_size.min(lowmem)
            }
            Machine::Q35 => {
                let mut lowmem = if ram_size >= 0xB000_0000 { 0x8000_0000 } else { 0xB000_0000 };
                if let Some(m) = max_below_4g.filter(|&m| m != 0) {
                    lowmem = lowmem.min(m);
                }
                ram_size.min(lowmem)
            }
        };
        let above = ram_size - below;
        let mut ram = Vec::new();
        if below > LEGACY_HOLE.start {
            ram.push(0..LEGACY_HOLE.start);
            if below > LEGACY_HOLE.end {
                ram.push(LEGACY_HOLE.end..below);
            }
        } else if below > 0 {
            ram.push(0..below);
        }
        if above > 0 {
            ram.push(4 * GIB..4 * GIB + above);
        }
        PhysMap { ram }
    }

    /// The RAM ranges.
    pub fn ram(&self) -> &[Range<u64>] {
        &self.ram
    }

    /// Is every byte of [addr, addr + len) RAM, outside the APIC page at `apic_base`
    /// (IA32_APIC_BASE) and outside QEMU's APIC MMIO page?
    pub fn is_ram(&self, addr: u64, len: u64, apic_base: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        if len == 0 {
            return false;
        }
        let overlaps_page = |page: u64| addr < page + 0x1000 && page < end;
        if overlaps_page(apic_base & APIC_BASE_MASK) || overlaps_page(APIC_DEFAULT_BASE) {
            return false;
        }
        self.ram.iter().any(|r| r.start <= addr && end <= r.end)
    }

    /// The map QEMU builds for its command line `args` (argv without argv[0] or with it).
    pub fn from_qemu_args<S: AsRef<str>>(args: &[S]) -> Result<PhysMap, String> {
        let mut ram_size = DEFAULT_RAM;
        let mut machine = Machine::I440fx;
        let mut max_below_4g = None;
        let mut it = args.iter().map(AsRef::as_ref);
        while let Some(a) = it.next() {
            let opt = a.strip_prefix("--").or_else(|| a.strip_prefix('-'));
            match opt {
                Some("m") => {
                    let v = it.next().ok_or("-m without a value")?;
                    ram_size = parse_m(v)?;
                }
                Some("M") | Some("machine") => {
                    let v = it.next().ok_or("-machine without a value")?;
                    for (i, part) in v.split(',').enumerate() {
                        let (key, val) = match part.split_once('=') {
                            Some((k, v)) => (k, v),
                            None if i == 0 => ("type", part),
                            None => continue,
                        };
                        match key {
                            "type" => machine = parse_machine(val)?,
                            "max-ram-below-4g" => max_below_4g = Some(parse_size(val, 1)?),
                            "memory-backend" => {
                                return Err(format!(
                                    "-machine memory-backend={val}: the RAM size of a memory backend is not known to the plugin; use -m"
                                ))
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(PhysMap::pc(machine, ram_size, max_below_4g))
    }
}

fn parse_machine(v: &str) -> Result<Machine, String> {
    match v {
        "pc" | "none" => Ok(Machine::I440fx),
        "q35" => Ok(Machine::Q35),
        _ if v.starts_with("pc-i440fx") => Ok(Machine::I440fx),
        _ if v.starts_with("pc-q35") => Ok(Machine::Q35),
        _ => Err(format!("machine type '{v}' is not supported (pc, q35): its RAM layout is not known to the plugin")),
    }
}

/// `-m [size=]N[KMGT]` (no suffix: MiB).
fn parse_m(v: &str) -> Result<u64, String> {
    for (i, part) in v.split(',').enumerate() {
        match part.split_once('=') {
            Some(("size", s)) => return parse_size(s, 1 << 20),
            None if i == 0 => return parse_size(part, 1 << 20),
            _ => {}
        }
    }
    Ok(DEFAULT_RAM)
}

/// A QEMU size: a number with an optional K/M/G/T suffix (or `unit` without one).
fn parse_size(s: &str, unit: u64) -> Result<u64, String> {
    let bad = || format!("cannot parse the memory size '{s}'");
    let (num, mul) = match s.chars().last() {
        Some(c) if c.is_ascii_alphabetic() => {
            let mul = match c.to_ascii_uppercase() {
                'B' => 1,
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(bad()),
            };
            (&s[..s.len() - 1], mul)
        }
        _ => (s, unit),
    };
    let n: f64 = num.parse().map_err(|_| bad())?;
    if !(n >= 0.0) {
        return Err(bad());
    }
    Ok((n * mul as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pc_machine_has_128_mib_minus_the_legacy_hole() {
        let m = PhysMap::from_qemu_args(&["qemu-system-x86_64", "-kernel", "x.elf"]).unwrap();
        assert_eq!(m.ram(), &[0..0xA_0000, 0x10_0000..128 << 20]);
        assert!(m.is_ram(0x20_0000, 0x1000, APIC_DEFAULT_BASE));
        assert!(!m.is_ram(0xB_8000, 2, APIC_DEFAULT_BASE), "VGA window");
        assert!(!m.is_ram(0xF_0000, 16, APIC_DEFAULT_BASE), "BIOS");
        assert!(!m.is_ram((128 << 20) - 4, 8, APIC_DEFAULT_BASE), "straddles the end of RAM");
        assert!(!m.is_ram(0xFEC0_0000, 4, APIC_DEFAULT_BASE), "IOAPIC");
        assert!(!m.is_ram(0xFED0_0000, 4, APIC_DEFAULT_BASE), "HPET");
        assert!(!m.is_ram(APIC_DEFAULT_BASE + 0x80, 4, APIC_DEFAULT_BASE), "xAPIC TPR");
    }

    #[test]
    fn apic_page_relocated_into_ram_is_not_ram_and_the_default_page_stays_excluded() {
        let m = PhysMap::from_qemu_args(&["-m", "256"]).unwrap();
        let base = 0x0800_0000 | 0x900; // IA32_APIC_BASE with BSP and EN set
        assert!(!m.is_ram(0x0800_0000, 16, base));
        assert!(!m.is_ram(0x0800_0FFF, 1, base));
        assert!(m.is_ram(0x0800_1000, 16, base));
        assert!(m.is_ram(0x07FF_F000, 0x1000, base));
        assert!(!m.is_ram(0x07FF_F000, 0x1001, base), "last byte on the APIC page");
        assert!(!m.is_ram(APIC_DEFAULT_BASE, 4, base), "QEMU's APIC MMIO does not move");
    }

    #[test]
    fn ram_above_4g_follows_the_i440fx_and_q35_splits() {
        let pc = PhysMap::from_qemu_args(&["-m", "4G"]).unwrap();
        assert_eq!(pc.ram(), &[0..0xA_0000, 0x10_0000..0xC000_0000, 4 * GIB..5 * GIB]);
        let pc = PhysMap::from_qemu_args(&["-m", "size=3584M"]).unwrap();
        assert_eq!(pc.ram().last(), Some(&(4 * GIB..4 * GIB + 512 * (1 << 20))));
        let q35 = PhysMap::from_qemu_args(&["-machine", "q35,accel=tcg", "-m", "2G"]).unwrap();
        assert_eq!(q35.ram(), &[0..0xA_0000, 0x10_0000..2 * GIB]);
        let q35 = PhysMap::from_qemu_args(&["-M", "pc-q35-10.2", "-m", "3G"]).unwrap();
        assert_eq!(q35.ram(), &[0..0xA_0000, 0x10_0000..0x8000_0000, 4 * GIB..5 * GIB]);
        let capped = PhysMap::from_qemu_args(&["-machine", "type=pc,max-ram-below-4g=1G", "-m", "2G"]).unwrap();
        assert_eq!(capped.ram(), &[0..0xA_0000, 0x10_0000..GIB, 4 * GIB..5 * GIB]);
    }

    #[test]
    fn unknown_machines_and_sizes_are_clear_errors() {
        assert!(PhysMap::from_qemu_args(&["-M", "microvm"]).unwrap_err().contains("microvm"));
        assert!(PhysMap::from_qemu_args(&["-m", "lots"]).unwrap_err().contains("lots"));
        assert!(PhysMap::from_qemu_args(&["-m"]).is_err());
        assert!(PhysMap::from_qemu_args(&["-machine", "pc,memory-backend=mem0"]).is_err());
    }

    #[test]
    fn wrapping_and_empty_ranges_are_not_ram() {
        let m = PhysMap::pc(Machine::I440fx, 1 << 30, None);
        assert!(!m.is_ram(u64::MAX - 4, 8, APIC_DEFAULT_BASE));
        assert!(!m.is_ram(0x1000, 0, APIC_DEFAULT_BASE));
    }
}
