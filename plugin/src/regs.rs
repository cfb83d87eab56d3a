//! Guest registers of the current vCPU, by name, through the plugin register API.
//! Reads need a callback registered with QEMU_PLUGIN_CB_R_REGS, writes with RW_REGS.
//!
//! The block callback reads RIP for every executed block, so reads go straight to the C API with
//! one GLib byte array reused per vCPU (the qemu-plugin crate's wrapper allocates two buffers per
//! read) and registers are looked up by position, not by name.

use qemu_plugin::sys::{
    qemu_plugin_get_registers, qemu_plugin_read_register, qemu_plugin_reg_descriptor, qemu_plugin_register,
    qemu_plugin_write_register, GByteArray,
};
use std::ffi::CStr;

/// The registers the full-system plugin uses.
const NAMES: &[&str] = &[
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "eflags", "cs", "ds", "ss", "es", "fs", "gs", "fs_base", "gs_base", "cr0", "cr3", "cr4", "efer",
    "cr2",
];

use crate::glib::{g_array_free, g_byte_array_new, g_byte_array_set_size};

pub struct Regs {
    handles: [*mut qemu_plugin_register; NAMES.len()],
    /// xmm0..xmm15 (adaptive PEBS's XMMs group), read only for a PEBS record.
    xmm: [*mut qemu_plugin_register; 16],
    buf: *mut GByteArray,
}

// SAFETY: the handles and the byte array are only used from the owning vCPU's callbacks (the
// per-vCPU state is behind a mutex); QEMU's register handles are valid for the whole run.
unsafe impl Send for Regs {}

/// Position of `name` in NAMES (keep the two in the same order). A match, not a search, so that
/// calls with a literal name fold to a constant: the block callback reads RIP for every block.
#[inline(always)]
fn index(name: &str) -> Option<usize> {
    match name {
        "rax" => Some(0),
        "rbx" => Some(1),
        "rcx" => Some(2),
        "rdx" => Some(3),
        "rsi" => Some(4),
        "rdi" => Some(5),
        "rbp" => Some(6),
        "rsp" => Some(7),
        "r8" => Some(8),
        "r9" => Some(9),
        "r10" => Some(10),
        "r11" => Some(11),
        "r12" => Some(12),
        "r13" => Some(13),
        "r14" => Some(14),
        "r15" => Some(15),
        "rip" => Some(16),
        "eflags" => Some(17),
        "cs" => Some(18),
        "ds" => Some(19),
        "ss" => Some(20),
        "es" => Some(21),
        "fs" => Some(22),
        "gs" => Some(23),
        "fs_base" => Some(24),
        "gs_base" => Some(25),
        "cr0" => Some(26),
        "cr3" => Some(27),
        "cr4" => Some(28),
        "efer" => Some(29),
        "cr2" => Some(30),
        _ => None,
    }
}



impl Regs {
    /// Look the handles up (must run in vCPU context, e.g. the vCPU init callback).
    pub fn discover() -> Regs {
        let mut handles = [std::ptr::null_mut(); NAMES.len()];
        let mut xmm = [std::ptr::null_mut(); 16];
        // SAFETY: the GArray returned by QEMU holds qemu_plugin_reg_descriptor elements; it is
        // freed here, the handles stay valid.
        unsafe {
            let all = qemu_plugin_get_registers();
            if !all.is_null() {
                let descs =
                    std::slice::from_raw_parts((*all).data as *const qemu_plugin_reg_descriptor, (*all).len as usize);
                for d in descs {
                    if d.name.is_null() {
                        continue;
                    }
                    let name = CStr::from_ptr(d.name).to_str().ok();
                    if let Some(i) = name.and_then(index) {
                        handles[i] = d.handle;
                    }
                    if let Some(i) = name.and_then(|n| n.strip_prefix("xmm")).and_then(|n| n.parse::<usize>().ok()) {
                        if i < 16 {
                            xmm[i] = d.handle;
                        }
                    }
                }
                g_array_free(all, true);
            }
        }
        // SAFETY: plain GLib allocation, kept for the vCPU's lifetime.
        let buf = unsafe { g_byte_array_new() };
        Regs { handles, xmm, buf }
    }

    pub fn missing(&self) -> Vec<&'static str> {
        NAMES.iter().zip(self.handles.iter()).filter(|(_, h)| h.is_null()).map(|(n, _)| *n).collect()
    }

    /// Read a register (zero-extended to 64 bits). Inlined so that `index` of a literal name
    /// folds to a constant: out of line, every read compared the name with the list's strings
    /// (~80 instructions of a RIP read, callgrind).
    #[inline(always)]
    pub fn get(&self, name: &str) -> Option<u64> {
        self.read(*self.handles.get(index(name)?)?)
    }

    #[inline(never)]
    fn read(&self, h: *mut qemu_plugin_register) -> Option<u64> {
        if h.is_null() || self.buf.is_null() {
            return None;
        }
        // SAFETY: `buf` is a live GByteArray; QEMU appends the register's bytes to it.
        unsafe {
            g_byte_array_set_size(self.buf, 0);
            let n = qemu_plugin_read_register(h, self.buf);
            if n <= 0 || (*self.buf).data.is_null() {
                return None;
            }
            let len = ((*self.buf).len as usize).min(8);
            let mut b = [0u8; 8];
            std::ptr::copy_nonoverlapping((*self.buf).data, b.as_mut_ptr(), len);
            Some(u64::from_le_bytes(b))
        }
    }

    /// XMM register `i` (0-15) in memory byte order (QEMU's gdbstub appends the low quadword
    /// first, `gdb_get_reg128`); None if QEMU does not expose it.
    pub fn xmm(&self, i: usize) -> Option<[u8; 16]> {
        let h = *self.xmm.get(i)?;
        if h.is_null() || self.buf.is_null() {
            return None;
        }
        // SAFETY: as in `get`.
        unsafe {
            g_byte_array_set_size(self.buf, 0);
            let n = qemu_plugin_read_register(h, self.buf);
            if n != 16 || (*self.buf).data.is_null() || (*self.buf).len < 16 {
                return None;
            }
            let mut b = [0u8; 16];
            std::ptr::copy_nonoverlapping((*self.buf).data, b.as_mut_ptr(), 16);
            Some(b)
        }
    }

    /// Write a register with its own width (low bytes of `value`).
    pub fn set(&self, name: &str, value: u64) -> bool {
        let Some(h) = index(name).map(|i| self.handles[i]).filter(|h| !h.is_null()) else { return false };
        // The register's width: read it first (QEMU needs a buffer at least that large).
        // SAFETY: as in `get`; the write array points at a local buffer QEMU only reads.
        unsafe {
            g_byte_array_set_size(self.buf, 0);
            let width = qemu_plugin_read_register(h, self.buf);
            if width <= 0 {
                return false;
            }
            let mut bytes = value.to_le_bytes();
            let mut array = GByteArray { data: bytes.as_mut_ptr(), len: (width as u32).min(8) };
            qemu_plugin_write_register(h, &mut array) > 0
        }
    }
}
