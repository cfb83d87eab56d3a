//! Guest registers of the current vCPU, by name, through the plugin register API.
//! Reads need a callback registered with QEMU_PLUGIN_CB_R_REGS, writes with RW_REGS.

use qemu_plugin::RegisterDescriptor;
use std::collections::HashMap;

/// The registers the full-system plugin uses.
const NAMES: &[&str] = &[
    "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "eflags", "cs", "ds", "ss", "es", "fs", "gs", "fs_base", "gs_base", "cr0", "cr3", "cr4", "efer",
];

pub struct Regs {
    by_name: HashMap<&'static str, RegisterDescriptor<'static>>,
}

impl Regs {
    /// Look the handles up (must run in vCPU context, e.g. the vCPU init callback).
    pub fn discover() -> Regs {
        let mut by_name = HashMap::new();
        if let Ok(all) = qemu_plugin::qemu_plugin_get_registers() {
            for r in all {
                if let Some(n) = NAMES.iter().find(|n| **n == r.name) {
                    by_name.insert(*n, r);
                }
            }
        }
        Regs { by_name }
    }

    pub fn missing(&self) -> Vec<&'static str> {
        NAMES.iter().filter(|n| !self.by_name.contains_key(*n)).copied().collect()
    }

    /// Read a register (zero-extended to 64 bits).
    pub fn get(&self, name: &str) -> Option<u64> {
        let raw = self.by_name.get(name)?.read().ok()?;
        let mut b = [0u8; 8];
        let n = raw.len().min(8);
        b[..n].copy_from_slice(&raw[..n]);
        Some(u64::from_le_bytes(b))
    }

    /// Write a register with its own width (low bytes of `value`).
    pub fn set(&self, name: &str, value: u64) -> bool {
        let Some(d) = self.by_name.get(name) else { return false };
        let Ok(cur) = d.read() else { return false };
        let mut bytes = value.to_le_bytes()[..cur.len().min(8)].to_vec();
        d.write(&mut bytes).is_ok()
    }
}
