//! The Branch Trace Store unit (SDM Vol. 3B §18.4.8-18.4.9; seed 001 §6.5, §9-§11).
//!
//! With IA32_DEBUGCTL.TR = 1 and .BTS = 1, every taken branch, interrupt, exception and far
//! transfer writes a record {from, to, flags} at the BTS index of the DS save area (IA32_DS_AREA)
//! and advances the index by the record size. The fields are read from guest memory for every
//! record, as hardware does: software may move the index (an interrupt handler resetting it to
//! the base) at any time.
//!
//! - BTINT = 0 (circular buffer): when the index reaches the absolute maximum it is reset to the
//!   base (seed 001 §6.5.3).
//! - BTINT = 1: records are written up to the absolute maximum and not past it (seed §6.5.5:
//!   "even inside the PMI handler the buffer is still filled up to the maximum"); a transfer
//!   with the buffer full is not recorded (counted in `BtsStats::full`).
//! - DS interrupt: when the index is at or above the interrupt threshold (seed §6.5.4: "equal or
//!   greater"), a PMI is requested through the local APIC's LVTPC. The seed (§6.5.6) observes it
//!   also with BTINT = 0 when the threshold is below the maximum, which is why the SDM tells
//!   software to put the threshold above the maximum for a circular buffer; the model follows
//!   the seed. While the index stays at or above the threshold every further transfer requests
//!   the PMI again (seed §8: the handler must reset the index to avoid repeated DS interrupts);
//!   the LVTPC mask set on delivery keeps them from nesting.
//! - CPL filtering (DS-CPL, CPUID.1:ECX[4]): BTS_OFF_OS drops transfers whose *target* runs at
//!   CPL 0, BTS_OFF_USR those whose target runs at CPL > 0 (seed §10.1/§10.2; experiment 14-11
//!   shows only the IRET back to ring 3 recorded when the kernel is excluded).
//! - A DS area or buffer the guest left unmapped: the record is not written and is counted in
//!   `BtsStats::unwritable` (the SDM requires the DS area and buffers to be in always-present,
//!   non-paged memory and leaves the behaviour otherwise undefined; QEMU keeps running).

use super::debugctl::{check_ds_area_write, DebugCtl, IA32_DEBUGCTL, IA32_DS_AREA};
use super::ds_area::{BtsFields, BtsRecord, DsFormat};
use super::prediction::predicted;
use crate::guest_mem::LinearMemory;
use crate::insn_class::{BranchKind, FarKind};
use crate::pt::msr::Fault;
use crate::pt::packet::ExecMode;
use crate::pt::tracer::{AsyncKind, Context};

/// Whether a retired near branch of class `kind` with next IP `next` was taken. A conditional
/// branch whose target is its own next instruction cannot be told apart and counts as not taken.
pub fn is_taken(kind: BranchKind, nlip: u64, next: u64) -> bool {
    match kind {
        BranchKind::Conditional { target } => next == target && target != nlip,
        BranchKind::DirectJump { .. }
        | BranchKind::DirectCall { .. }
        | BranchKind::IndirectJump
        | BranchKind::IndirectCall
        | BranchKind::Return => true,
        BranchKind::None | BranchKind::AlwaysFaults | BranchKind::Far(_) | BranchKind::SoftwareInterrupt => false,
    }
}

/// Counters reported at exit and used by tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BtsStats {
    /// Records written to the BTS buffer.
    pub records: u64,
    /// Transfers dropped by BTS_OFF_OS / BTS_OFF_USR.
    pub filtered: u64,
    /// Transfers not recorded because the buffer was full (BTINT = 1, index >= maximum).
    pub full: u64,
    /// Transfers not recorded because the DS area or the buffer could not be accessed.
    pub unwritable: u64,
    /// DS interrupts requested.
    pub pmis: u64,
}

/// What one transfer did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreOutcome {
    /// A record was written.
    pub written: bool,
    /// The index is at or above the threshold: raise the DS interrupt (PMI).
    pub pmi: bool,
}

#[derive(Clone, Debug)]
pub struct BranchTraceStore {
    debugctl: DebugCtl,
    ds_area: u64,
    /// CPUID.1:ECX[2] DTES64 of the profile.
    dtes64: bool,
    /// IA32_EFER.LMA as the caller last reported it (IA-32e mode: 64-bit and compatibility
    /// mode), for the DS format when DTES64 = 0. Without a report, 64-bit code counts as IA-32e.
    ia32e: bool,
    stats: BtsStats,
}

impl BranchTraceStore {
    pub fn new(dtes64: bool) -> Self {
        BranchTraceStore { debugctl: DebugCtl::default(), ds_area: 0, dtes64, ia32e: false, stats: BtsStats::default() }
    }

    /// CPUID.1:ECX[2] DTES64: without it the DS format depends on IA-32e mode (`set_ia32e`).
    pub fn dtes64(&self) -> bool {
        self.dtes64
    }

    /// Report IA32_EFER.LMA (only needed without DTES64).
    pub fn set_ia32e(&mut self, lma: bool) {
        self.ia32e = lma;
    }

    pub fn debugctl(&self) -> DebugCtl {
        self.debugctl
    }

    pub fn ds_area(&self) -> u64 {
        self.ds_area
    }

    pub fn stats(&self) -> BtsStats {
        self.stats
    }

    /// Records are being stored (TR = 1 and BTS = 1).
    pub fn active(&self) -> bool {
        self.debugctl.stores_branches()
    }

    pub fn owns(index: u32) -> bool {
        index == IA32_DEBUGCTL || index == IA32_DS_AREA
    }

    /// RDMSR of IA32_DEBUGCTL or IA32_DS_AREA.
    pub fn read_msr(&self, index: u32) -> Option<u64> {
        match index {
            IA32_DEBUGCTL => Some(self.debugctl.0),
            IA32_DS_AREA => Some(self.ds_area),
            _ => None,
        }
    }

    /// WRMSR of IA32_DEBUGCTL or IA32_DS_AREA; #GP(0) leaves the MSR unchanged.
    pub fn write_msr(&mut self, index: u32, value: u64) -> Result<(), Fault> {
        match index {
            IA32_DEBUGCTL => self.debugctl = DebugCtl::check_write(value)?,
            IA32_DS_AREA => self.ds_area = check_ds_area_write(value)?,
            _ => return Err(Fault::Gp),
        }
        Ok(())
    }

    /// A near branch at `ip` retired in context `ctx` (its CPL is the target's) and execution
    /// continues at `next`: a record if it was taken.
    pub fn on_branch(&mut self, mem: &mut impl LinearMemory, ip: u64, nlip: u64, kind: BranchKind, next: u64, ctx: Context) -> StoreOutcome {
        if !self.active() || !is_taken(kind, nlip, next) {
            return StoreOutcome::default();
        }
        self.record(mem, ip, next, ctx.cpl, self.ia32e || ctx.mode == ExecMode::Bit64, predicted(kind, ip, next))
    }

    /// A far transfer (SYSCALL, SYSRET, IRET, far JMP/CALL/RET...) at `ip` retired into `to`.
    pub fn on_far_transfer(&mut self, mem: &mut impl LinearMemory, ip: u64, _kind: FarKind, next: u64, to: Context) -> StoreOutcome {
        if !self.active() {
            return StoreOutcome::default();
        }
        self.record(mem, ip, next, to.cpl, self.ia32e || to.mode == ExecMode::Bit64, false)
    }

    /// An interrupt, exception or INT n delivered to `handler` in context `to`. The record's
    /// "from" is the IP the event is attributed to (the faulting instruction, the INT n itself,
    /// or for an interrupt the instruction that would have run next) — the same IP Intel PT
    /// reports in the event's FUP (SDM Table 33-23).
    pub fn on_async(&mut self, mem: &mut impl LinearMemory, why: AsyncKind, handler: u64, to: Context) -> StoreOutcome {
        if !self.active() {
            return StoreOutcome::default();
        }
        self.record(mem, why.fup_ip(), handler, to.cpl, self.ia32e || to.mode == ExecMode::Bit64, false)
    }

    /// A taken transfer `from` -> `to` retired; `target_cpl` is the privilege level at `to`,
    /// `ia32e` whether the processor is in IA-32e mode (DS format selection).
    pub fn record(
        &mut self,
        mem: &mut impl LinearMemory,
        from: u64,
        to: u64,
        target_cpl: u8,
        ia32e: bool,
        predicted: bool,
    ) -> StoreOutcome {
        if !self.active() {
            return StoreOutcome::default();
        }
        let ctl = self.debugctl;
        if (target_cpl == 0 && ctl.bts_off_os()) || (target_cpl != 0 && ctl.bts_off_usr()) {
            self.stats.filtered += 1;
            return StoreOutcome::default();
        }
        let fmt = DsFormat::select(self.dtes64, ia32e);
        let Ok(f) = BtsFields::read(mem, self.ds_area, fmt) else {
            self.stats.unwritable += 1;
            return StoreOutcome::default();
        };
        let mut out = StoreOutcome::default();
        let mut index = f.index;
        if ctl.btint() && index >= f.abs_max {
            self.stats.full += 1;
        } else {
            let rec = BtsRecord { from, to, predicted }.encode(fmt);
            if mem.write_linear(index, &rec[..fmt.record_size() as usize]).is_err() {
                self.stats.unwritable += 1;
                return StoreOutcome::default();
            }
            index = index.wrapping_add(fmt.record_size());
            if !ctl.btint() && index >= f.abs_max {
                index = f.base;
            }
            if BtsFields::write_index(mem, self.ds_area, fmt, index).is_err() {
                self.stats.unwritable += 1;
                return StoreOutcome::default();
            }
            self.stats.records += 1;
            out.written = true;
        }
        let index = match fmt {
            DsFormat::Bits32 => index & 0xFFFF_FFFF,
            DsFormat::Bits64 => index,
        };
        if index >= f.threshold {
            self.stats.pmis += 1;
            out.pmi = true;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_mem::{GuestMemory, SparseMemory};

    const DS: u64 = 0x1000;
    const BUF: u64 = 0x2000;

    fn setup(records: u64, threshold_records: u64, debugctl: u64) -> (BranchTraceStore, SparseMemory) {
        let mut m = SparseMemory::new();
        m.add_ram(0x1000, 0x2000);
        for (i, v) in [BUF, BUF, BUF + 24 * records, BUF + 24 * threshold_records].iter().enumerate() {
            m.write_u64(DS + 8 * i as u64, *v).unwrap();
        }
        let mut b = BranchTraceStore::new(true);
        b.write_msr(IA32_DS_AREA, DS).unwrap();
        b.write_msr(IA32_DEBUGCTL, debugctl).unwrap();
        (b, m)
    }

    fn index(m: &mut SparseMemory) -> u64 {
        m.read_u64(DS + 8).unwrap()
    }

    fn record_at(m: &mut SparseMemory, slot: u64) -> BtsRecord {
        BtsRecord::decode(&m.bytes(BUF + 24 * slot, 24), DsFormat::Bits64).unwrap()
    }

    #[test]
    fn circular_buffer_wraps_to_the_base_at_the_maximum_without_interrupt() {
        // Seed 001 Figure "BTS buffer example": 10 records, threshold one record past the maximum.
        let (mut b, mut m) = setup(10, 11, 0xC0);
        for i in 0..13u64 {
            let o = b.record(&mut m, 0x100 + i, 0x200 + i, 0, true, false);
            assert_eq!(o, StoreOutcome { written: true, pmi: false });
        }
        assert_eq!(index(&mut m), BUF + 3 * 24);
        assert_eq!(record_at(&mut m, 0).from, 0x100 + 10);
        assert_eq!(record_at(&mut m, 2).to, 0x200 + 12);
        assert_eq!(record_at(&mut m, 3).from, 0x100 + 3);
        assert_eq!(b.stats().records, 13);
    }

    #[test]
    fn btint_raises_the_ds_interrupt_when_the_index_reaches_the_threshold_and_stops_at_the_maximum() {
        let (mut b, mut m) = setup(4, 4, 0x1C0);
        let outs: Vec<StoreOutcome> = (0..6).map(|i| b.record(&mut m, i, i + 1, 0, true, false)).collect();
        assert_eq!(outs[2], StoreOutcome { written: true, pmi: false });
        assert_eq!(outs[3], StoreOutcome { written: true, pmi: true });
        // Full: nothing written, the interrupt is requested again until software resets the index.
        assert_eq!(outs[4], StoreOutcome { written: false, pmi: true });
        assert_eq!(index(&mut m), BUF + 4 * 24);
        assert_eq!(b.stats().full, 2);
        assert_eq!(m.bytes(BUF + 4 * 24, 8), vec![0; 8], "nothing past the maximum");
        // The handler resets the index: recording resumes at the base.
        m.write_u64(DS + 8, BUF).unwrap();
        assert_eq!(b.record(&mut m, 0x77, 0x88, 0, true, false), StoreOutcome { written: true, pmi: false });
        assert_eq!(record_at(&mut m, 0).from, 0x77);
    }

    #[test]
    fn threshold_below_maximum_interrupts_even_in_circular_mode() {
        // Seed 001 §6.5.6: the interrupt does not depend on BTINT.
        let (mut b, mut m) = setup(4, 2, 0xC0);
        assert!(!b.record(&mut m, 1, 2, 0, true, false).pmi);
        assert!(b.record(&mut m, 1, 2, 0, true, false).pmi);
    }

    #[test]
    fn bts_off_os_records_only_transfers_into_user_mode() {
        // Seed 001 experiment 14-11: INT into the kernel is not recorded, IRET back is.
        let (mut b, mut m) = setup(10, 11, 0x2C0);
        assert!(!b.record(&mut m, 0x40_1000, 0xE800, 0, true, false).written);
        assert!(!b.record(&mut m, 0xE800, 0xE880, 0, true, false).written);
        assert!(b.record(&mut m, 0xE883, 0x40_1002, 3, true, false).written);
        assert_eq!(b.stats().filtered, 2);
        assert_eq!(record_at(&mut m, 0), BtsRecord { from: 0xE883, to: 0x40_1002, predicted: false });
        let (mut b, mut m) = setup(10, 11, 0x4C0);
        assert!(b.record(&mut m, 0x40_1000, 0xE800, 0, true, false).written);
        assert!(!b.record(&mut m, 0xE883, 0x40_1002, 3, true, false).written);
    }

    #[test]
    fn only_taken_branches_are_recorded_with_their_ips() {
        let (mut b, mut m) = setup(10, 11, 0xC0);
        let k = Context::KERNEL64;
        let jcc = BranchKind::Conditional { target: 0x100 };
        assert!(!b.on_branch(&mut m, 0x180, 0x182, jcc, 0x182, k).written, "not taken");
        assert!(b.on_branch(&mut m, 0x180, 0x182, jcc, 0x100, k).written);
        assert!(!b.on_branch(&mut m, 0x190, 0x193, BranchKind::None, 0x193, k).written);
        assert!(b.on_branch(&mut m, 0x200, 0x205, BranchKind::DirectCall { target: 0x205 }, 0x205, k).written, "call next");
        let user = Context { cpl: 3, ..k };
        b.on_far_transfer(&mut m, 0x300, FarKind::Sysret, 0x40_0000, user);
        b.on_async(&mut m, AsyncKind::Fault { ip: 0x40_0010 }, 0xE000, k);
        b.on_async(&mut m, AsyncKind::Interrupt { resume_ip: 0x40_0020 }, 0xE100, k);
        let got: Vec<(u64, u64, bool)> = (0..5).map(|i| record_at(&mut m, i)).map(|r| (r.from, r.to, r.predicted)).collect();
        assert_eq!(
            got,
            vec![
                (0x180, 0x100, true),
                (0x200, 0x205, true),
                (0x300, 0x40_0000, false),
                (0x40_0010, 0xE000, false),
                (0x40_0020, 0xE100, false)
            ]
        );
    }

    #[test]
    fn tr_without_bts_or_bts_without_tr_stores_nothing() {
        for ctl in [0x40, 0x80, 0x180] {
            let (mut b, mut m) = setup(10, 11, ctl);
            assert_eq!(b.record(&mut m, 1, 2, 0, true, false), StoreOutcome::default());
            assert_eq!(index(&mut m), BUF);
        }
    }

    #[test]
    fn thirty_two_bit_format_without_dtes64_outside_ia32e_mode() {
        let mut m = SparseMemory::new();
        m.add_ram(0x1000, 0x2000);
        for (i, v) in [BUF as u32, BUF as u32, BUF as u32 + 120, BUF as u32 + 132].iter().enumerate() {
            m.write_phys(DS + 4 * i as u64, &v.to_le_bytes()).unwrap();
        }
        let mut b = BranchTraceStore::new(false);
        b.write_msr(IA32_DS_AREA, DS).unwrap();
        b.write_msr(IA32_DEBUGCTL, 0xC0).unwrap();
        b.record(&mut m, 0xE883, 0x9000, 3, false, true);
        assert_eq!(m.bytes(BUF, 12), vec![0x83, 0xE8, 0, 0, 0, 0x90, 0, 0, 0x10, 0, 0, 0]);
        assert_eq!(m.bytes(DS + 4, 4), (BUF as u32 + 12).to_le_bytes().to_vec());
    }

    #[test]
    fn compatibility_mode_without_dtes64_uses_the_64_bit_format_in_ia32e_mode() {
        let mut m = SparseMemory::new();
        m.add_ram(0x1000, 0x2000);
        for (i, v) in [BUF, BUF, BUF + 240, BUF + 264].iter().enumerate() {
            m.write_u64(DS + 8 * i as u64, *v).unwrap();
        }
        let mut b = BranchTraceStore::new(false);
        b.write_msr(IA32_DS_AREA, DS).unwrap();
        b.write_msr(IA32_DEBUGCTL, 0xC0).unwrap();
        b.set_ia32e(true);
        let compat = Context { cpl: 3, cr3: 0, mode: ExecMode::Bit32 };
        b.on_branch(&mut m, 0x1000, 0x1002, BranchKind::DirectJump { target: 0x1100 }, 0x1100, compat);
        assert_eq!(record_at(&mut m, 0), BtsRecord { from: 0x1000, to: 0x1100, predicted: true });
        assert_eq!(index(&mut m), BUF + 24);
    }

    #[test]
    fn unmapped_ds_area_or_buffer_drops_the_record_and_counts_it() {
        let (mut b, mut m) = setup(10, 11, 0xC0);
        m.write_u64(DS + 8, 0x9000_0000).unwrap(); // index points at no memory
        assert!(!b.record(&mut m, 1, 2, 0, true, false).written);
        b.write_msr(IA32_DS_AREA, 0x7000_0000).unwrap(); // DS area itself unmapped
        assert!(!b.record(&mut m, 1, 2, 0, true, false).written);
        assert_eq!(b.stats().unwritable, 2);
    }

    #[test]
    fn msr_writes_with_reserved_bits_fault_and_leave_the_value() {
        let (mut b, _) = setup(10, 11, 0xC0);
        assert_eq!(b.write_msr(IA32_DEBUGCTL, 1 << 20), Err(Fault::Gp));
        assert_eq!(b.read_msr(IA32_DEBUGCTL), Some(0xC0));
        assert_eq!(b.write_msr(IA32_DS_AREA, 1 << 60), Err(Fault::Gp));
        assert_eq!(b.read_msr(IA32_DS_AREA), Some(DS));
    }
}
