//! Reading guest state from inside vCPU callbacks.
//!
//! qemu-plugin 10.1.0-v2's read_memory wrappers hand QEMU a fake GByteArray and crash it
//! (shared/reference/qemu-notes.md); this calls the API with a real GLib array instead.

use qemu_plugin::sys::{qemu_plugin_read_memory_vaddr, GByteArray};

use crate::glib::{g_byte_array_free, g_byte_array_new};
use pttrace_core::phys_map::{PhysMap, APIC_DEFAULT_BASE};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Full-system mode: the guest's RAM (issue 12). Every guest-physical access of the plugin
/// (trace output, ToPA tables, Debug Store records, descriptor reads) is checked against it
/// first, so nothing the plugin does ever reaches a device model. Unset in user mode.
static PHYS_MAP: OnceLock<PhysMap> = OnceLock::new();
/// IA32_APIC_BASE as the guest last wrote it (all vCPUs; SDM §33.2.7.4).
static APIC_BASE: AtomicU64 = AtomicU64::new(APIC_DEFAULT_BASE | 0x900);

pub fn set_phys_map(map: PhysMap) {
    let _ = PHYS_MAP.set(map);
}

pub fn set_apic_base(value: u64) {
    APIC_BASE.store(value, Ordering::Relaxed);
}

/// May the plugin access guest-physical [addr, addr + len)? (Always in user mode.)
fn phys_ok(addr: u64, len: usize) -> bool {
    match PHYS_MAP.get() {
        Some(m) => m.is_ram(addr, len as u64, APIC_BASE.load(Ordering::Relaxed)),
        None => true,
    }
}

/// Full-system mode: is every page of linear [addr, addr + len) mapped to RAM (checked before
/// any access through QEMU's vaddr accessors, which would otherwise read MMIO)?
fn linear_ok(addr: u64, len: usize) -> bool {
    if PHYS_MAP.get().is_none() {
        return true;
    }
    let mut a = addr;
    let end = addr.wrapping_add(len as u64);
    while a != end {
        let n = (0x1000 - (a & 0xFFF)).min(end.wrapping_sub(a));
        let mut hw = 0u64;
        // SAFETY: writes the translation into a local.
        if !unsafe { qemu_plugin::sys::qemu_plugin_translate_vaddr(a, &mut hw) } || !phys_ok(hw, n as usize) {
            return false;
        }
        a = a.wrapping_add(n);
    }
    true
}

/// Read `buf.len()` bytes of guest virtual memory at `addr` (current vCPU). False if any byte
/// could not be read.
pub fn read_vaddr(addr: u64, buf: &mut [u8]) -> bool {
    if buf.is_empty() || !linear_ok(addr, buf.len()) {
        return false;
    }
    // SAFETY: the array is created and freed here; QEMU fills it with at most `buf.len()` bytes.
    unsafe {
        let array = g_byte_array_new();
        if array.is_null() {
            return false;
        }
        let ok = qemu_plugin_read_memory_vaddr(addr, array, buf.len());
        let got = (*array).len as usize;
        let ok = ok && got >= buf.len() && !(*array).data.is_null();
        if ok {
            std::ptr::copy_nonoverlapping((*array).data, buf.as_mut_ptr(), buf.len());
        }
        g_byte_array_free(array, true);
        ok
    }
}

pub fn read_u64(addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    read_vaddr(addr, &mut b).then(|| u64::from_le_bytes(b))
}

/// Guest-physical memory of the current vCPU's address space, through QEMU's hwaddr accessors,
/// restricted to RAM (`phys_ok`). Valid only inside vCPU callbacks (system mode). Non-RAM and
/// failing accesses are errors and never reach QEMU.
pub struct PhysMem;

impl pttrace_core::guest_mem::GuestMemory for PhysMem {
    fn read_phys(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        if !phys_ok(addr, buf.len()) {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        raw_read_phys(addr, buf)
    }

    fn write_phys(&mut self, addr: u64, data: &[u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        if !phys_ok(addr, data.len()) {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        raw_write_phys(addr, data)
    }
}

/// The local APIC's registers, where QEMU maps them (FEE00000H): the one device the plugin
/// accesses on purpose, to read LVTPC and send a PMI through the ICR.
pub struct ApicMmio;

impl pttrace_core::guest_mem::GuestMemory for ApicMmio {
    fn read_phys(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        if addr & !0xFFF != APIC_DEFAULT_BASE {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        raw_read_phys(addr, buf)
    }

    fn write_phys(&mut self, addr: u64, data: &[u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        if addr & !0xFFF != APIC_DEFAULT_BASE {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        raw_write_phys(addr, data)
    }
}

fn raw_read_phys(addr: u64, buf: &mut [u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
    use qemu_plugin::sys::{qemu_plugin_hwaddr_operation_result as R, qemu_plugin_read_memory_hwaddr};
    // SAFETY: real GLib array created and freed here.
    unsafe {
        let array = g_byte_array_new();
        if array.is_null() {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        let r = qemu_plugin_read_memory_hwaddr(addr, array, buf.len());
        let ok = r == R::QEMU_PLUGIN_HWADDR_OPERATION_OK
            && (*array).len as usize >= buf.len()
            && !(*array).data.is_null();
        if ok {
            std::ptr::copy_nonoverlapping((*array).data, buf.as_mut_ptr(), buf.len());
        }
        g_byte_array_free(array, true);
        if ok {
            Ok(())
        } else {
            Err(pttrace_core::guest_mem::MemError::NotRam { addr })
        }
    }
}

fn raw_write_phys(addr: u64, data: &[u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
    use qemu_plugin::sys::{qemu_plugin_hwaddr_operation_result as R, qemu_plugin_write_memory_hwaddr};
    // QEMU only reads `data`/`len` of the array for a write.
    let mut array = GByteArray { data: data.as_ptr() as *mut u8, len: data.len() as u32 };
    // SAFETY: `array` points at `data`, which outlives the call; QEMU does not keep it.
    let r = unsafe { qemu_plugin_write_memory_hwaddr(addr, &mut array) };
    if r == R::QEMU_PLUGIN_HWADDR_OPERATION_OK {
        Ok(())
    } else {
        Err(pttrace_core::guest_mem::MemError::NotRam { addr })
    }
}

/// Guest linear memory of the current vCPU (its page tables), through QEMU's vaddr accessors.
/// Valid only inside vCPU callbacks. An unmapped page fails the access (no guest #PF).
pub struct LinearMem;

impl pttrace_core::guest_mem::LinearMemory for LinearMem {
    fn read_linear(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        if read_vaddr(addr, buf) {
            Ok(())
        } else {
            Err(pttrace_core::guest_mem::MemError::NotRam { addr })
        }
    }

    fn write_linear(&mut self, addr: u64, data: &[u8]) -> Result<(), pttrace_core::guest_mem::MemError> {
        use qemu_plugin::sys::qemu_plugin_write_memory_vaddr;
        if data.is_empty() || !linear_ok(addr, data.len()) {
            return Err(pttrace_core::guest_mem::MemError::NotRam { addr });
        }
        let mut array = GByteArray { data: data.as_ptr() as *mut u8, len: data.len() as u32 };
        // SAFETY: `array` points at `data`, which outlives the call; QEMU only reads it.
        if unsafe { qemu_plugin_write_memory_vaddr(addr, &mut array) } {
            Ok(())
        } else {
            Err(pttrace_core::guest_mem::MemError::NotRam { addr })
        }
    }
}
