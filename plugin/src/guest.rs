//! Reading guest state from inside vCPU callbacks.
//!
//! qemu-plugin 10.1.0-v2's read_memory wrappers hand QEMU a fake GByteArray and crash it
//! (shared/reference/qemu-notes.md); this calls the API with a real GLib array instead.

use qemu_plugin::sys::{qemu_plugin_read_memory_vaddr, GByteArray};

use crate::glib::{g_byte_array_free, g_byte_array_new};

/// Read `buf.len()` bytes of guest virtual memory at `addr` (current vCPU). False if any byte
/// could not be read.
pub fn read_vaddr(addr: u64, buf: &mut [u8]) -> bool {
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

/// Guest-physical memory of the current vCPU's address space, through QEMU's hwaddr accessors.
/// Valid only inside vCPU callbacks (system mode). Non-RAM and failing accesses are errors.
pub struct PhysMem;

impl pttrace_core::guest_mem::GuestMemory for PhysMem {
    fn read_phys(
        &mut self,
        addr: u64,
        buf: &mut [u8],
    ) -> Result<(), pttrace_core::guest_mem::MemError> {
        use qemu_plugin::sys::{
            qemu_plugin_hwaddr_operation_result as R, qemu_plugin_read_memory_hwaddr,
        };
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

    fn write_phys(
        &mut self,
        addr: u64,
        data: &[u8],
    ) -> Result<(), pttrace_core::guest_mem::MemError> {
        use qemu_plugin::sys::{
            qemu_plugin_hwaddr_operation_result as R, qemu_plugin_write_memory_hwaddr,
        };
        // QEMU only reads `data`/`len` of the array for a write.
        let mut array = GByteArray {
            data: data.as_ptr() as *mut u8,
            len: data.len() as u32,
        };
        // SAFETY: `array` points at `data`, which outlives the call; QEMU does not keep it.
        let r = unsafe { qemu_plugin_write_memory_hwaddr(addr, &mut array) };
        if r == R::QEMU_PLUGIN_HWADDR_OPERATION_OK {
            Ok(())
        } else {
            Err(pttrace_core::guest_mem::MemError::NotRam { addr })
        }
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
        let mut array = GByteArray { data: data.as_ptr() as *mut u8, len: data.len() as u32 };
        // SAFETY: `array` points at `data`, which outlives the call; QEMU only reads it.
        if unsafe { qemu_plugin_write_memory_vaddr(addr, &mut array) } {
            Ok(())
        } else {
            Err(pttrace_core::guest_mem::MemError::NotRam { addr })
        }
    }
}
