//! Consumer-side access to guest-physical memory (the rust-vmm vm-memory style: the model only
//! sees a trait; the plugin implements it with QEMU's hwaddr accessors, tests with `SparseMemory`).

use std::collections::BTreeMap;

/// Why a guest-physical access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemError {
    /// No RAM at this address (MMIO, ROM, unassigned, beyond the end of memory).
    NotRam { addr: u64 },
}

/// Guest-physical memory as the trace output units see it. Accesses are all-or-error.
pub trait GuestMemory {
    fn read_phys(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write_phys(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError>;

    fn read_u64(&mut self, addr: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read_phys(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn write_u64(&mut self, addr: u64, v: u64) -> Result<(), MemError> {
        self.write_phys(addr, &v.to_le_bytes())
    }
}

/// In-memory guest RAM for tests: byte-addressed, RAM only inside the declared ranges, everything
/// else behaves like MMIO/unassigned space (accesses fail). Records every write.
#[derive(Clone, Debug, Default)]
pub struct SparseMemory {
    /// start -> bytes
    ram: BTreeMap<u64, Vec<u8>>,
    /// Every successful write, in order: (address, length).
    pub writes: Vec<(u64, usize)>,
}

impl SparseMemory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Declare `len` bytes of zeroed RAM at `start` (ranges must not overlap).
    pub fn add_ram(&mut self, start: u64, len: usize) -> &mut Self {
        self.ram.insert(start, vec![0; len]);
        self
    }

    fn locate(&mut self, addr: u64, len: usize) -> Result<(&mut Vec<u8>, usize), MemError> {
        let (start, bytes) = self.ram.range_mut(..=addr).next_back().ok_or(MemError::NotRam { addr })?;
        let off = (addr - *start) as usize;
        if off.checked_add(len).is_none_or(|end| end > bytes.len()) {
            return Err(MemError::NotRam { addr });
        }
        Ok((bytes, off))
    }

    /// Read back bytes for assertions (panics outside RAM: test helper only).
    pub fn bytes(&mut self, addr: u64, len: usize) -> Vec<u8> {
        let (b, off) = self.locate(addr, len).expect("test read outside RAM");
        b[off..off + len].to_vec()
    }
}

impl GuestMemory for SparseMemory {
    fn read_phys(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let (b, off) = self.locate(addr, buf.len())?;
        buf.copy_from_slice(&b[off..off + buf.len()]);
        Ok(())
    }

    fn write_phys(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        let (b, off) = self.locate(addr, data.len())?;
        b[off..off + data.len()].copy_from_slice(data);
        self.writes.push((addr, data.len()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accesses_outside_ram_fail_without_partial_effects() {
        let mut m = SparseMemory::new();
        m.add_ram(0x1000, 0x1000);
        m.write_u64(0x1ff8, 0x1122334455667788).unwrap();
        assert_eq!(m.read_u64(0x1ff8).unwrap(), 0x1122334455667788);
        assert_eq!(m.write_phys(0x1ffc, &[0; 8]), Err(MemError::NotRam { addr: 0x1ffc }));
        assert_eq!(m.read_u64(0x1ff8).unwrap(), 0x1122334455667788);
        assert!(m.read_u64(0x0).is_err());
        assert_eq!(m.writes, vec![(0x1ff8, 8)]);
    }
}

/// Guest linear (virtual) memory of the current vCPU, as the Debug Store sees it (IA32_DS_AREA
/// and the BTS buffer fields are linear addresses). Accesses are all-or-error: a page that is not
/// mapped (or not RAM) fails the whole access.
pub trait LinearMemory {
    fn read_linear(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError>;
    fn write_linear(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError>;
}

/// Tests: linear addresses map 1:1 onto the sparse RAM.
impl LinearMemory for SparseMemory {
    fn read_linear(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.read_phys(addr, buf)
    }
    fn write_linear(&mut self, addr: u64, data: &[u8]) -> Result<(), MemError> {
        self.write_phys(addr, data)
    }
}
