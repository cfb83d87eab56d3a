//! Retirement events of executed blocks (`crate::system_flow::RetireSink`) fanned out to the
//! units that see them in full-system mode: Intel PT's tracer, Atom RTIT, the Branch Trace Store
//! (records written into guest linear memory right away, in vCPU context), the LBRs (SDM Vol. 3B
//! §18.4.8.1, §18.4.7 FREEZE_LBRS_ON_PMI) and the performance counters with PEBS's EventingIP.
//!
//! - [`Retire`]: every event to every unit, as blocks run through the model one by one.
//! - [`CountingSink`]: a run of recorded blocks while only the counters and the LBRs see blocks:
//!   the retirements tallied and added at the end, only the run's last near branch reaching the
//!   tracer.
//! - [`BtsUnit`]: the BTS unit with the guest linear memory its records go to (the emulator's).

use crate::bts::BranchTraceStore;
use crate::guest_mem::LinearMemory;
use crate::insn_class::{BranchKind, FarKind};
use crate::lbr::{self, BranchRecorder};
use crate::pmu::{tally::RetirementTally, Pmu, Retired};
use crate::pt::packet::ExecMode;
use crate::pt::tracer::{AsyncKind, Context, Tracer};
use crate::rtit::tracer::RtitTracer;
use crate::system_flow::RetireSink;

/// IA32_DEBUGCTL and the Debug Store (`BranchTraceStore`) with the guest linear memory its BTS
/// records are written to (SDM Vol. 3B §18.4.9: linear addresses of the DS save area and the
/// BTS buffer). Everything else reaches the store through `Deref`.
pub struct BtsUnit<L> {
    pub store: BranchTraceStore,
    pub linear: L,
}

impl<L> BtsUnit<L> {
    pub fn new(store: BranchTraceStore, linear: L) -> Self {
        BtsUnit { store, linear }
    }
}

impl<L> std::ops::Deref for BtsUnit<L> {
    type Target = BranchTraceStore;
    #[inline(always)]
    fn deref(&self) -> &BranchTraceStore {
        &self.store
    }
}

impl<L> std::ops::DerefMut for BtsUnit<L> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut BranchTraceStore {
        &mut self.store
    }
}

/// Retirement events fanned out to the Intel PT tracer and the Branch Trace Store. BTS records
/// are written into guest linear memory right here, in vCPU context.
pub struct Retire<'a, L> {
    pub pt: &'a mut Tracer,
    /// The Atom RTIT tracer (`profile=silvermont`).
    pub rtit: Option<&'a mut RtitTracer>,
    pub bts: &'a mut BtsUnit<L>,
    /// A BTS record reached the interrupt threshold: raise the DS interrupt after the event.
    pub bts_pmi: bool,
    /// The performance counters (told about retirements only while one counts; the caller
    /// asks `take_pmi` afterwards).
    pub pmu: &'a mut Pmu,
    /// The LBR stack while it records (DEBUGCTL.LBR = 1, or IA32_LBR_CTL.LBREn = 1 with Arch
    /// LBR, and not frozen); None from the moment a retirement requests a PMI with
    /// FREEZE_LBRS_ON_PMI (`Pmu::lbr_freeze_requested`).
    pub lbr: Option<&'a mut dyn BranchRecorder>,
    /// The emulated core clock while the LBRs record (the plugin's `core_clock`, read once per
    /// block): the LBR records' cycle counts (LBR_INFO[15:0] CYC_CNT).
    pub lbr_clock: u64,
    /// The instruction that just retired requested that freeze: its own branch record (which
    /// follows its retirement) is the last one.
    pub lbr_freeze_after: bool,
    /// Where the instruction that triggered a due PEBS record is noted (its EventingIP).
    pub pebs_eventing: &'a mut Option<u64>,
}

impl<L: LinearMemory> RetireSink for Retire<'_, L> {
    fn mode(&self) -> ExecMode {
        self.pt.context().mode
    }
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        if let Some(l) = self.lbr.as_deref_mut() {
            lbr::near_branch(l, kind, ip, nlip, next, self.pt.context().cpl, self.lbr_clock);
        }
        self.lbr_freeze_now();
        self.pt.branch(ip, nlip, kind, next);
        if let Some(r) = self.rtit.as_deref_mut() {
            r.branch(ip, nlip, kind, next);
        }
        if self.bts.active() {
            let ctx = self.pt.context();
            let BtsUnit { store, linear } = &mut *self.bts;
            self.bts_pmi |= store.on_branch(linear, ip, nlip, kind, next, ctx).pmi;
        }
    }
    fn far_transfer(&mut self, ip: u64, nlip: u64, kind: FarKind, next: u64, to: Context) {
        if let Some(l) = self.lbr.as_deref_mut() {
            // Far transfers are not predicted by the static model (`bts::prediction`).
            l.record(Some(BranchKind::Far(kind)), ip, next, to.cpl, true, self.lbr_clock);
        }
        self.lbr_freeze_now();
        if kind == FarKind::Iret && self.pt.event_en() {
            // Event Trace: CFE(IRET) and FUP(the IRET) before the middle packets and TIP.
            self.pt.cfe_iret(ip);
        }
        self.pt.far_transfer(kind, next, to);
        if let Some(r) = self.rtit.as_deref_mut() {
            r.far_transfer(ip, nlip, kind, next, to);
        }
        if self.bts.active() {
            let BtsUnit { store, linear } = &mut *self.bts;
            self.bts_pmi |= store.on_far_transfer(linear, ip, kind, next, to).pmi;
        }
    }
    fn mov_cr3(&mut self, next: u64, cr3: u64) {
        self.pt.mov_cr3(next, cr3);
        if let Some(r) = self.rtit.as_deref_mut() {
            r.mov_cr3(next, cr3);
        }
    }
    fn software_interrupt(&mut self, ip: u64, nlip: u64, handler: u64, to: Context) {
        if let Some(l) = self.lbr.as_deref_mut() {
            l.record(Some(BranchKind::SoftwareInterrupt), ip, handler, to.cpl, true, self.lbr_clock);
        }
        self.lbr_freeze_now();
        let why = AsyncKind::SoftwareInterrupt { ip };
        self.pt.async_event(why, handler, to);
        if let Some(r) = self.rtit.as_deref_mut() {
            r.software_interrupt(ip, nlip, handler, to);
        }
        self.bts_event(why, handler, to);
    }
    fn async_event(&mut self, why: AsyncKind, handler: u64, to: Context) {
        // Not a record of the instruction that retired: after a freeze it requested (e.g. the
        // PMI's own delivery).
        self.lbr_freeze_now();
        if let Some(l) = self.lbr.as_deref_mut() {
            // FROM as for BTS: the faulting instruction, or the next one for an interrupt.
            l.record(None, why.fup_ip(), handler, to.cpl, true, self.lbr_clock);
        }
        self.pt.async_event(why, handler, to);
        if let Some(r) = self.rtit.as_deref_mut() {
            r.async_event(why, handler, to);
        }
        self.bts_event(why, handler, to);
    }
    fn plain_retired(&mut self, n: u64, last_ip: u64) {
        self.lbr_freeze_now();
        if self.pmu.active() {
            self.pmu.retire(n, Retired::PLAIN, self.pt.context().cpl);
            self.note_pebs(last_ip);
            // No branch among them: nothing more is recorded once one requested a PMI.
            self.lbr_freeze_after = self.pmu.lbr_freeze_requested();
            self.lbr_freeze_now();
        }
    }
    fn last_retired(&mut self, kind: BranchKind, ip: u64, nlip: u64, next: u64) {
        self.lbr_freeze_now();
        if self.pmu.active() {
            self.pmu.retire(1, Retired::of(kind, ip, nlip, next), self.pt.context().cpl);
            self.note_pebs(ip);
            // Its own branch record (reported next) still goes in.
            self.lbr_freeze_after = self.pmu.lbr_freeze_requested();
        }
    }
}

impl<L: LinearMemory> Retire<'_, L> {
    /// A freeze requested by a retirement takes effect (FREEZE_LBRS_ON_PMI, SDM §18.4.7).
    fn lbr_freeze_now(&mut self) {
        if std::mem::take(&mut self.lbr_freeze_after) {
            self.lbr = None;
        }
    }

    /// A PEBS record became due with the instruction at `ip` (exact when the instructions were
    /// reported one by one, see `Pmu::pebs_within`).
    fn note_pebs(&mut self, ip: u64) {
        if self.pmu.pebs_due() && self.pebs_eventing.is_none() {
            *self.pebs_eventing = Some(ip);
        }
    }

    /// The BTS record of an interrupt, exception or INT n.
    fn bts_event(&mut self, why: AsyncKind, handler: u64, to: Context) {
        if self.bts.active() {
            let BtsUnit { store, linear } = &mut *self.bts;
            self.bts_pmi |= store.on_async(linear, why, handler, to).pmi;
        }
    }
}

/// The retirement events of blocks recorded while only the counters and the LBRs see blocks
/// (the plugin's `run_recorded_counting`): instructions go to a tally added to the counters at the
/// end of the run (`RetirementTally`), taken near branches to the LBRs as they come; anything
/// else (not expected in such a run: far transfers and events end it) commits the tally first
/// and goes to `Retire`.
pub struct CountingSink<'a, L> {
    pub inner: Retire<'a, L>,
    pub tally: RetirementTally,
    pub cpl: u8,
    /// The last near branch, not yet reported to `inner`: with TraceEn = 0 and no BTS or
    /// RTIT (the plugin's `record_budget`) a branch only sets the tracer's resume IP (`Tracer::branch`), so
    /// the last one of the run is the one that counts.
    pub branch: Option<(u64, u64, BranchKind, u64)>,
    /// The LBRs while they record (kept here, not in `inner`, so that the deferred branch is
    /// not recorded twice; lent to `inner` for the general events). No freeze can happen in the
    /// run: no counter with INT overflows in it (`Pmu::blocks_before_pmi`).
    pub lbr: Option<&'a mut dyn BranchRecorder>,
    /// The core clock at the start of the block whose branch into it is reported next (see the plugin's
    /// `run_recorded_counting`).
    pub lbr_clock: u64,
}

impl<L: LinearMemory> RetireSink for CountingSink<'_, L> {
    fn mode(&self) -> ExecMode {
        self.inner.mode()
    }
    fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        if let Some(l) = self.lbr.as_deref_mut() {
            lbr::near_branch(l, kind, ip, nlip, next, self.cpl, self.lbr_clock);
        }
        self.branch = Some((ip, nlip, kind, next));
    }
    fn far_transfer(&mut self, ip: u64, nlip: u64, kind: FarKind, next: u64, to: Context) {
        self.commit();
        self.lend_lbr(|inner| inner.far_transfer(ip, nlip, kind, next, to));
        self.cpl = self.inner.pt.context().cpl;
    }
    fn mov_cr3(&mut self, next: u64, cr3: u64) {
        self.commit();
        self.inner.mov_cr3(next, cr3);
        self.cpl = self.inner.pt.context().cpl;
    }
    fn software_interrupt(&mut self, ip: u64, nlip: u64, handler: u64, to: Context) {
        self.commit();
        self.lend_lbr(|inner| inner.software_interrupt(ip, nlip, handler, to));
        self.cpl = self.inner.pt.context().cpl;
    }
    fn async_event(&mut self, why: AsyncKind, handler: u64, to: Context) {
        self.commit();
        self.lend_lbr(|inner| inner.async_event(why, handler, to));
        self.cpl = self.inner.pt.context().cpl;
    }
    fn plain_retired(&mut self, n: u64, _last_ip: u64) {
        self.tally.plain(n);
    }
    fn last_retired(&mut self, kind: BranchKind, ip: u64, nlip: u64, next: u64) {
        self.tally.one(Retired::of(kind, ip, nlip, next), self.inner.pmu, self.cpl);
    }
}

impl<'a, L: LinearMemory> CountingSink<'a, L> {
    /// `f` reports to `inner` with the LBRs (at this block's clock); a freeze it causes sticks.
    fn lend_lbr(&mut self, f: impl FnOnce(&mut Retire<'a, L>)) {
        self.inner.lbr = self.lbr.take();
        self.inner.lbr_clock = self.lbr_clock;
        f(&mut self.inner);
        self.lbr = self.inner.lbr.take();
    }

    /// Add the tally to the counters, at the CPL it was counted at (a PMI it asks for is left
    /// pending for `take_pmi`).
    pub fn commit(&mut self) {
        if let Some((ip, nlip, kind, next)) = self.branch.take() {
            self.inner.branch(ip, nlip, kind, next);
        }
        self.tally.commit(self.inner.pmu, self.cpl);
    }
}

