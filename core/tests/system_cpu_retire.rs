//! The retirement path of full-system mode (`system_cpu::retire`, issue 13): the events the flow
//! reports for executed blocks reach Intel PT, the LBRs (SDM Vol. 3B §18.4.8.1, FREEZE_LBRS_ON_PMI
//! §18.4.7), the Branch Trace Store (records in guest linear memory, §18.4.9; here linear =
//! physical) and the counters (PEBS's EventingIP), one event at a time (`Retire`) or tallied over
//! a run of recorded blocks (`CountingSink`). Ground truth: the BTS records decoded back from
//! memory, the LBR stack's entries and the counters read through RDMSR's path.

use pttrace_core::bts::{BranchTraceStore, BtsRecord, DsFormat, IA32_DEBUGCTL, IA32_DS_AREA};
use pttrace_core::guest_mem::{GuestMemory, SparseMemory};
use pttrace_core::insn_class::{BranchKind, FarKind};
use pttrace_core::lbr::{BranchRecorder, LbrStack};
use pttrace_core::pmu::tally::RetirementTally;
use pttrace_core::pmu::{Pmu, PmuCaps, IA32_A_PMC0, IA32_PEBS_ENABLE, IA32_PERFEVTSEL0, IA32_PERF_GLOBAL_CTRL, IA32_PMC0};
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};
use pttrace_core::system_cpu::retire::{BtsUnit, CountingSink, Retire};
use pttrace_core::system_flow::RetireSink;

/// DS save area and BTS buffer (64-bit format: 24-byte records).
const DS: u64 = 0x1000;
const BUF: u64 = 0x2000;
/// IA32_DEBUGCTL: [6] TR, [7] BTS.
const TR_BTS: u64 = 0xC0;
/// IA32_PERFEVTSEL: [17] OS, [20] INT, [22] EN.
const OS: u64 = 1 << 17;
const INT: u64 = 1 << 20;
const EN: u64 = 1 << 22;
/// INST_RETIRED.ANY_P (C0H/00H) and BR_INST_RETIRED.ALL_BRANCHES (C4H/00H).
const INST_RETIRED: u64 = 0xC0;
const BR_INST_RETIRED: u64 = 0xC4;

/// One CPU's units as the plugin's `Vcpu` holds them.
struct Units {
    pt: Tracer,
    pmu: Pmu,
    lbr: LbrStack,
    bts: BtsUnit<SparseMemory>,
    pebs_eventing: Option<u64>,
}

impl Units {
    fn new() -> Self {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x1000, 0x2000);
        Units {
            pt: Tracer::new(TraceConfig::default(), Context::KERNEL64),
            pmu: Pmu::new(PmuCaps::SKYLAKE),
            lbr: LbrStack::default(),
            bts: BtsUnit::new(BranchTraceStore::new(true), mem),
            pebs_eventing: None,
        }
    }

    /// BTS on (TR = BTS = 1) with a buffer of `records` records and the interrupt threshold at
    /// `threshold` records.
    fn with_bts(mut self, records: u64, threshold: u64) -> Self {
        for (i, v) in [BUF, BUF, BUF + 24 * records, BUF + 24 * threshold].iter().enumerate() {
            self.bts.linear.write_u64(DS + 8 * i as u64, *v).unwrap();
        }
        self.bts.write_msr(IA32_DS_AREA, DS).unwrap();
        self.bts.write_msr(IA32_DEBUGCTL, TR_BTS).unwrap();
        self
    }

    /// GP counter 0 counting `event` at CPL 0 (`sel`: more IA32_PERFEVTSEL0 bits), `left` events
    /// before it overflows.
    fn with_counter(mut self, event: u64, sel: u64, left: u64) -> Self {
        self.pmu.write(IA32_A_PMC0, (1 << 48) - left).unwrap();
        self.pmu.write(IA32_PERFEVTSEL0, event | OS | EN | sel).unwrap();
        self.pmu.write(IA32_PERF_GLOBAL_CTRL, 1).unwrap();
        self
    }

    /// The sink `run_block` builds: the LBRs recording (at core clock 0) when `lbr_on`.
    fn retire(&mut self, lbr_on: bool) -> Retire<'_, SparseMemory> {
        Retire {
            pt: &mut self.pt,
            rtit: None,
            bts: &mut self.bts,
            bts_pmi: false,
            pmu: &mut self.pmu,
            lbr: lbr_on.then_some(&mut self.lbr as &mut dyn BranchRecorder),
            lbr_clock: 0,
            lbr_freeze_after: false,
            pebs_eventing: &mut self.pebs_eventing,
        }
    }

    /// The sink `run_recorded_counting` builds, at CPL `cpl`, the LBRs recording.
    fn counting(&mut self, cpl: u8) -> CountingSink<'_, SparseMemory> {
        CountingSink {
            inner: Retire {
                pt: &mut self.pt,
                rtit: None,
                bts: &mut self.bts,
                bts_pmi: false,
                pmu: &mut self.pmu,
                lbr: None,
                lbr_clock: 0,
                lbr_freeze_after: false,
                pebs_eventing: &mut self.pebs_eventing,
            },
            tally: RetirementTally::default(),
            cpl,
            branch: None,
            lbr: Some(&mut self.lbr),
            lbr_clock: 0,
        }
    }

    /// The LBR stack's (from, to) entries, youngest first.
    fn lbrs(&self) -> Vec<(u64, u64)> {
        self.lbr.entries().filter(|e| e.0 != 0).map(|(f, t, _)| (f, t)).collect()
    }

    /// The BTS records written so far, from the DS area's index.
    fn bts_records(&mut self) -> Vec<(u64, u64)> {
        let index = self.bts.linear.read_u64(DS + 8).unwrap();
        (0..(index - BUF) / 24)
            .map(|slot| BtsRecord::decode(&self.bts.linear.bytes(BUF + 24 * slot, 24), DsFormat::Bits64).unwrap())
            .map(|r| (r.from, r.to))
            .collect()
    }

    fn counter(&self) -> u64 {
        self.pmu.read(IA32_PMC0).unwrap()
    }
}

const JCC: BranchKind = BranchKind::Conditional { target: 0x100 };

#[test]
fn a_taken_branch_reaches_the_lbrs_and_the_bts_buffer_and_the_threshold_asks_for_the_ds_interrupt() {
    let mut u = Units::new().with_bts(4, 2);
    let mut r = u.retire(true);
    r.branch(0x180, 0x182, JCC, 0x182); // not taken: neither records it
    assert!(!r.bts_pmi);
    r.branch(0x180, 0x182, JCC, 0x100);
    assert!(!r.bts_pmi, "one record: below the threshold");
    r.branch(0x104, 0x109, BranchKind::DirectCall { target: 0x400 }, 0x400);
    assert!(r.bts_pmi, "the record reaching the threshold asks for the DS interrupt");
    assert_eq!(u.bts_records(), vec![(0x180, 0x100), (0x104, 0x400)]);
    assert_eq!(u.lbrs(), vec![(0x104, 0x400), (0x180, 0x100)]);
}

#[test]
fn an_interrupt_is_recorded_from_the_instruction_it_returns_to_and_a_fault_from_the_faulting_one() {
    let mut u = Units::new().with_bts(8, 9);
    let mut r = u.retire(true);
    r.async_event(AsyncKind::Interrupt { resume_ip: 0x40_0020 }, 0xE100, Context::KERNEL64);
    r.async_event(AsyncKind::Fault { ip: 0x40_0010 }, 0xE000, Context::KERNEL64);
    r.software_interrupt(0x40_0030, 0x40_0032, 0xE200, Context::KERNEL64);
    r.far_transfer(0xE300, 0xE302, FarKind::Iret, 0x40_0032, Context::USER64);
    let want = vec![(0x40_0020, 0xE100), (0x40_0010, 0xE000), (0x40_0030, 0xE200), (0xE300, 0x40_0032)];
    assert_eq!(u.bts_records(), want);
    assert_eq!(u.lbrs(), want.into_iter().rev().collect::<Vec<_>>());
}

#[test]
fn a_pmi_with_freeze_lbrs_on_pmi_keeps_the_overflowing_branchs_record_and_drops_every_later_one() {
    // A branch counter with INT one branch from overflowing; IA32_DEBUGCTL[11] FREEZE_LBRS_ON_PMI.
    let mut u = Units::new().with_counter(BR_INST_RETIRED, INT, 1);
    u.pmu.set_debugctl(1 << 11);
    let mut r = u.retire(true);
    r.plain_retired(3, 0x17E);
    r.last_retired(JCC, 0x180, 0x182, 0x100);
    r.branch(0x180, 0x182, JCC, 0x100);
    // The next block: its plain instructions, its last branch and an interrupt (the PMI's own
    // delivery) are not recorded.
    r.plain_retired(2, 0x104);
    r.last_retired(BranchKind::DirectJump { target: 0x200 }, 0x106, 0x108, 0x200);
    r.branch(0x106, 0x108, BranchKind::DirectJump { target: 0x200 }, 0x200);
    r.async_event(AsyncKind::Interrupt { resume_ip: 0x200 }, 0xE100, Context::KERNEL64);
    assert!(u.pmu.take_pmi(), "the overflow asked for a PMI");
    assert_eq!(u.lbrs(), vec![(0x180, 0x100)]);
}

#[test]
fn a_pebs_record_is_due_at_the_instruction_after_the_overflow_and_notes_it_as_eventing_ip() {
    // INST_RETIRED with PEBS, 3 instructions from the overflow.
    let mut u = Units::new().with_counter(INST_RETIRED, 0, 3);
    u.pmu.write(IA32_PEBS_ENABLE, 1).unwrap();
    let mut r = u.retire(false);
    r.plain_retired(3, 0x1010); // the third overflows: armed, not yet due
    assert_eq!(*r.pebs_eventing, None);
    r.last_retired(BranchKind::None, 0x1012, 0x1014, 0x1014);
    assert_eq!(*r.pebs_eventing, Some(0x1012));
    r.plain_retired(1, 0x1014);
    assert_eq!(u.pebs_eventing, Some(0x1012), "the first instruction that made it due stays noted");
}

#[test]
fn a_counting_run_records_each_taken_branch_in_the_lbrs_once_and_counts_at_the_end() {
    let mut u = Units::new().with_counter(INST_RETIRED, 0, 1 << 40);
    let start = u.counter();
    let mut s = u.counting(0);
    for (ip, target) in [(0x110u64, 0x200u64), (0x210, 0x300), (0x310, 0x100)] {
        s.plain_retired(4, ip - 2);
        s.last_retired(BranchKind::DirectJump { target }, ip, ip + 2, target);
        s.branch(ip, ip + 2, BranchKind::DirectJump { target }, target);
    }
    assert_eq!(s.inner.pmu.read(IA32_PMC0).unwrap(), start, "tallied, not counted yet");
    s.commit();
    assert_eq!(u.counter() - start, 15);
    assert_eq!(u.lbrs(), vec![(0x310, 0x100), (0x210, 0x300), (0x110, 0x200)]);
}

#[test]
fn a_far_transfer_in_a_counting_run_counts_the_tally_at_the_cpl_it_retired_at() {
    // An OS-only counter: the kernel's instructions before a SYSRET count, the user's do not.
    let mut u = Units::new().with_counter(INST_RETIRED, 0, 1 << 40);
    let start = u.counter();
    let mut s = u.counting(0);
    s.plain_retired(5, 0x1008);
    s.last_retired(BranchKind::Far(FarKind::Sysret), 0x100A, 0x100D, 0x40_0000);
    s.far_transfer(0x100A, 0x100D, FarKind::Sysret, 0x40_0000, Context::USER64);
    assert_eq!(s.cpl, 3, "the run continues at the user's CPL");
    s.plain_retired(7, 0x40_0010);
    s.commit();
    assert_eq!(u.counter() - start, 6);
    assert_eq!(u.lbrs(), vec![(0x100A, 0x40_0000)]);
}
