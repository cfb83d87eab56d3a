//! The per-CPU facade (`system_cpu`, issue 13) driven through a fake guest port that records
//! what the facade asked of it; its output steps store packets through the same
//! `system_cpu::store_output` the plugin uses, and its memory is linear = physical.
//!
//! WRMSR (`system_cpu::wrmsr`): which unit a write reaches, the #GP(0) of a refused write with
//! the guest's registers to restore, the TraceEn 0 -> 1 and 1 -> 0 sequences with the output unit
//! started and flushed, the PMU counting the instructions before a WRMSR under the old
//! configuration, and MSRs left to the emulator. RDMSR (`system_cpu::rdmsr`): the #GP(0) decided
//! before the read, the counting before a PMU read, the unit's value in EDX:EAX after it (with
//! the output stored first), IA32_MISC_ENABLE's BTS/PEBS bits over QEMU's. RDPMC
//! (`system_cpu::rdpmc`): the #UD QEMU delivers undone and the instruction completed from the
//! PMU, or re-delivered as #GP(0). The output step's store (`system_cpu::store_output`): the
//! ToPA PMI of a filled INT region, STOP and output errors. CPUID (`system_cpu::cpuid`): the
//! registers QEMU answered differently from the profile rewritten, the others left. Event Trace
//! at an event's delivery (`system_cpu::event`): the vector from the IDT gate, CR2 for #PF, the IF
//! of the frame (above an error code or not) and of the handler.

use pttrace_core::arch_lbr::{ArchLbr, ArchLbrCaps};
use pttrace_core::bts::BranchTraceStore;
use pttrace_core::cpuid::{CpuidProfile, NativeLeaves};
use pttrace_core::guest_mem::SparseMemory;
use pttrace_core::insn_class::{BranchKind, FarKind};
use pttrace_core::lbr::{LbrLayout, LbrStack};
use pttrace_core::msr_map::{MsrMap, UnitWrite};
use pttrace_core::options::SystemOptions;
use pttrace_core::pmu::{Pmu, PmuCaps};
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::decode::PacketDecoder;
use pttrace_core::pt::packet::Packet;
use pttrace_core::pt::msr::{RtitMsrs, WriteEffect};
use pttrace_core::pt::output::OutputUnit;
use pttrace_core::pt::packet::ExecMode;
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};
use pttrace_core::rtit::tracer::{RtitOptions, RtitTracer};
use pttrace_core::system_cpu::cpuid;
use pttrace_core::system_cpu::event;
use pttrace_core::system_cpu::output::{self, OutputHandoff};
use pttrace_core::system_cpu::rdmsr::{self, Fixup, Rdmsr};
use pttrace_core::system_cpu::rdpmc::{self, Rdpmc};
use pttrace_core::system_cpu::wrmsr::{wrmsr, Wrmsr};
use pttrace_core::system_cpu::{store_output, GuestPort, MsrInsn, Reg, SystemCpu};

const IA32_APIC_BASE: u32 = 0x1B;
const IA32_EFER: u32 = 0xC000_0080;
const IA32_FIXED_CTR_CTRL: u32 = 0x38D;
const IA32_PERF_GLOBAL_CTRL: u32 = 0x38F;
const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
const IA32_RTIT_OUTPUT_BASE: u32 = 0x560;
const IA32_RTIT_OUTPUT_MASK_PTRS: u32 = 0x561;
const IA32_RTIT_CTL: u32 = 0x570;
const IA32_RTIT_STATUS: u32 = 0x571;
/// Atom RTIT's control register (seed 002).
const RTIT_CTL_ATOM: u32 = 0x768;

/// IA32_RTIT_CTL: TraceEn [0], OS [2], BranchEn [13].
const CTL_TRACE_OS_BRANCHES: u64 = 1 | (1 << 2) | (1 << 13);
/// The single output range: 4 KiB at 10000H.
const RANGE: u64 = 0x10000;

/// What the facade asked of the guest, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Call {
    /// #GP(0) at `insn` with these RCX, RDX for the handler.
    Gp { insn: MsrInsn, rcx: u64, rdx: u64 },
    Pmi,
    ApicBase(u64),
    /// `count_to(ip)`, with IA32_PERF_GLOBAL_CTRL as the PMU held it at that moment.
    CountTo { ip: u64, global_ctrl: u64 },
    CountCycles,
    StoreHeld,
    Drain,
    Flush,
}

struct Fake {
    msrs: RtitMsrs,
    tracer: Tracer,
    output: OutputUnit,
    output_active: bool,
    handoff: OutputHandoff,
    pmu: Pmu,
    lbr: LbrStack,
    arch_lbr: ArchLbr,
    bts: BranchTraceStore,
    rtit: Option<RtitTracer>,
    mem: SparseMemory,
    native_leaves: NativeLeaves,
    /// Indexed by `Reg as usize`.
    regs: [u64; 13],
    /// Every register write, in order.
    reg_writes: Vec<(Reg, u64)>,
    idt_base: Option<u64>,
    ctx: Context,
    cs_base: u64,
    calls: Vec<Call>,
    /// Every byte the output steps stored (the plugin's host copy).
    stored: Vec<u8>,
    /// Bytes generated after a ToPA STOP or an output error.
    lost: usize,
}

impl Fake {
    fn new(caps: PtCaps, pmu: PmuCaps) -> Fake {
        let mut mem = SparseMemory::new();
        mem.add_ram(RANGE, 0x1000);
        Fake {
            msrs: RtitMsrs::default(),
            tracer: Tracer::new(TraceConfig { num_ranges: caps.num_addr_ranges as usize, ..TraceConfig::default() }, Context::KERNEL64),
            output: OutputUnit::new(caps),
            output_active: false,
            handoff: OutputHandoff::default(),
            pmu: Pmu::new(pmu),
            lbr: LbrStack::default(),
            arch_lbr: ArchLbr::new(ArchLbrCaps::SAPPHIRE_RAPIDS),
            bts: BranchTraceStore::new(true),
            rtit: None,
            mem,
            native_leaves: NativeLeaves::default(),
            regs: [0; 13],
            reg_writes: Vec::new(),
            idt_base: None,
            ctx: Context { cpl: 0, cr3: 0x5000, mode: ExecMode::Bit64 },
            cs_base: 0,
            calls: Vec::new(),
            stored: Vec::new(),
            lost: 0,
        }
        .with(Reg::Rflags, 1 << 9)
    }

    fn with(mut self, reg: Reg, value: u64) -> Fake {
        self.regs[reg as usize] = value;
        self
    }

    /// WRMSR of `value` to `index` at `ip` (a 2-byte instruction).
    fn wrmsr(&mut self, map: &MsrMap, index: u32, value: u64, ip: u64) -> Wrmsr {
        self.regs[Reg::Rax as usize] = 0xDEAD_0000_0000_0000 | (value & 0xFFFF_FFFF); // RAX[63:32] is ignored
        self.regs[Reg::Rcx as usize] = u64::from(index);
        self.regs[Reg::Rdx as usize] = value >> 32;
        wrmsr(self, map, ip, ip + 2)
    }

    /// The facade's store (`system_cpu::store_output`), as the plugin's output steps call it.
    fn store(&mut self) {
        let mut bytes = Vec::new();
        self.lost += store_output(self, |b| bytes.extend_from_slice(b));
        self.stored.extend(bytes);
    }
}

impl GuestPort for Fake {
    type Mem = SparseMemory;
    type Linear = SparseMemory;

    fn cpu(&mut self) -> SystemCpu<'_, SparseMemory> {
        SystemCpu {
            msrs: &mut self.msrs,
            tracer: &mut self.tracer,
            output: &mut self.output,
            output_active: &mut self.output_active,
            handoff: &mut self.handoff,
            pmu: &mut self.pmu,
            lbr: &mut self.lbr,
            arch_lbr: &mut self.arch_lbr,
            bts: &mut self.bts,
            rtit: self.rtit.as_mut(),
            mem: &mut self.mem,
            native_leaves: &mut self.native_leaves,
        }
    }
    fn reg(&mut self, reg: Reg) -> u64 {
        self.regs[reg as usize]
    }
    fn set_reg(&mut self, reg: Reg, value: u64) -> bool {
        self.reg_writes.push((reg, value));
        self.regs[reg as usize] = value;
        true
    }
    fn idt_base(&mut self) -> Option<u64> {
        self.idt_base
    }
    fn linear(&mut self) -> &mut SparseMemory {
        &mut self.mem
    }
    fn context(&mut self) -> Context {
        self.ctx
    }
    fn cs_base(&mut self) -> u64 {
        self.cs_base
    }
    fn guest_tsc(&mut self) -> u64 {
        1_000_000
    }
    fn raise_gp(&mut self, insn: MsrInsn, rcx: u64, rdx: u64) {
        self.calls.push(Call::Gp { insn, rcx, rdx });
    }
    fn deliver_pmi(&mut self) {
        self.calls.push(Call::Pmi);
    }
    fn apic_base_written(&mut self, value: u64) {
        self.calls.push(Call::ApicBase(value));
    }
    fn count_to(&mut self, ip: u64) {
        let global_ctrl = self.pmu.read(IA32_PERF_GLOBAL_CTRL).unwrap();
        self.calls.push(Call::CountTo { ip, global_ctrl });
    }
    fn count_cycles(&mut self) {
        self.calls.push(Call::CountCycles);
    }
    fn store_held(&mut self) {
        self.calls.push(Call::StoreHeld);
        if self.output_active && !self.tracer.output().is_empty() {
            self.store();
        }
    }
    fn drain(&mut self) {
        self.calls.push(Call::Drain);
        if self.output_active {
            self.store();
        } else {
            self.tracer.clear_output();
        }
    }
    fn flush_output(&mut self) {
        self.calls.push(Call::Flush);
        if self.output_active {
            self.store();
        }
    }
}

fn skylake() -> MsrMap {
    MsrMap { caps: PtCaps::SKYLAKE, rtit: false, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake }
}

/// The single range at `RANGE` programmed with plain WRMSRs (no trace started).
fn with_range(f: &mut Fake, map: &MsrMap) {
    assert_eq!(f.wrmsr(map, IA32_RTIT_OUTPUT_BASE, RANGE, 0x1000), Wrmsr::Pt(WriteEffect::Plain));
    assert_eq!(f.wrmsr(map, IA32_RTIT_OUTPUT_MASK_PTRS, 0xFFF, 0x1002), Wrmsr::Pt(WriteEffect::Plain));
    f.calls.clear();
}

#[test]
fn a_reserved_rtit_ctl_bit_raises_gp_with_the_guests_rcx_and_rdx_to_restore() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    with_range(&mut f, &map);
    // IA32_RTIT_CTL[63] is reserved (SDM Vol. 3C §33.2.8.2): EDX = 8000_0000H.
    let effect = f.wrmsr(&map, IA32_RTIT_CTL, (1 << 63) | CTL_TRACE_OS_BRANCHES, 0x2000);
    assert_eq!(effect, Wrmsr::Gp);
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Gp { insn: MsrInsn::Wrmsr, rcx: u64::from(IA32_RTIT_CTL), rdx: 0x8000_0000 }]);
    assert_eq!(f.msrs.read(IA32_RTIT_CTL, &map.caps), Ok(0), "nothing changed");
    assert!(!f.tracer.trace_en() && !f.output_active);
    assert!(f.stored.is_empty() && f.tracer.output().is_empty(), "no packets");
}

#[test]
fn trace_en_0_to_1_starts_the_output_and_1_to_0_leaves_every_byte_and_the_pointers_in_memory() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    with_range(&mut f, &map);
    f.cs_base = 0x40_0000;
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES, 0x40_1000), Wrmsr::Pt(WriteEffect::TraceEnabled));
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Drain]);
    assert!(f.output_active && f.tracer.trace_en());
    assert_eq!(f.tracer.context(), f.ctx, "the context read from the guest at the WRMSR");
    // The drain after the enable stored the PSB+ into the range.
    assert_eq!(&f.stored[..16], &[0x02, 0x82].repeat(8)[..], "PSB first");
    assert_eq!(f.mem.bytes(RANGE, f.stored.len()), f.stored);
    // The PSB+ carries the guest's CR3 (PIP), and the TIP.PGE the WRMSR's next instruction as an
    // offset from the CS base (CPUID.(14H,0):ECX[31] LIP = 0 on this part, SDM §33.3.1.1):
    // 401002H - 400000H.
    let mut dump = String::new();
    pttrace_core::pt::dump::dump(&f.stored, &mut dump).unwrap();
    let line = |name: &str| dump.lines().find(|l| l.split_whitespace().nth(1) == Some(name)).unwrap_or_else(|| panic!("no {name}:\n{dump}"));
    assert!(line("pip").ends_with("cr3  0000000000005000"), "{dump}");
    assert!(line("tip.pge").ends_with("ip   0000000000001002"), "{dump}");

    f.calls.clear();
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES & !1, 0x40_2000), Wrmsr::Pt(WriteEffect::TraceDisabled));
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Flush]);
    assert!(!f.output_active && !f.tracer.trace_en());
    assert!(f.tracer.output().is_empty(), "the disable's packets were flushed");
    assert_eq!(f.mem.bytes(RANGE, f.stored.len()), f.stored, "the whole stream is in the range");
    // IA32_RTIT_OUTPUT_MASK_PTRS[63:32] OutputOffset: the bytes stored, right after the WRMSR.
    let ptrs = f.msrs.read(IA32_RTIT_OUTPUT_MASK_PTRS, &map.caps).unwrap();
    assert_eq!(ptrs >> 32, f.stored.len() as u64);
    assert!(f.stored.len() > 16 + 2, "PSB+ and the disable's TIP.PGD");
}

#[test]
fn pend_topa_pmi_with_inject_psb_pmi_on_enable_raises_the_topa_pmi_at_the_enable() {
    let map = MsrMap { caps: PtCaps::SAPPHIRE_RAPIDS, ..skylake() };
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    with_range(&mut f, &map);
    // IA32_RTIT_STATUS[7] PendTopaPMI, as a context restore writes it back.
    assert_eq!(f.wrmsr(&map, IA32_RTIT_STATUS, 1 << 7, 0x3000), Wrmsr::Pt(WriteEffect::Plain));
    f.calls.clear();
    // IA32_RTIT_CTL[56] InjectPsbPmiOnEnable.
    let ctl = CTL_TRACE_OS_BRANCHES | (1 << 56);
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, ctl, 0x3002), Wrmsr::Pt(WriteEffect::TraceEnabled));
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Drain, Call::Pmi]);
    // IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI.
    assert_eq!(f.pmu.read(IA32_PERF_GLOBAL_STATUS).unwrap() & (1 << 55), 1 << 55);
}

#[test]
fn a_pmu_write_counts_the_instructions_before_it_under_the_old_configuration() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    // Fixed counter 0 counting user instructions, enabled by IA32_PERF_GLOBAL_CTRL[32] (the reset
    // value enables every counter, so it is cleared first).
    assert_eq!(f.wrmsr(&map, IA32_PERF_GLOBAL_CTRL, 0, 0x100), Wrmsr::Unit { write: UnitWrite::Pmu { counting_started: false }, context_refreshed: false });
    assert_eq!(f.wrmsr(&map, IA32_FIXED_CTR_CTRL, 2, 0x102), Wrmsr::Unit { write: UnitWrite::Pmu { counting_started: false }, context_refreshed: false });
    f.calls.clear();
    f.tracer.set_context(Context::USER64);
    let effect = f.wrmsr(&map, IA32_PERF_GLOBAL_CTRL, 1 << 32, 0x104);
    assert_eq!(effect, Wrmsr::Unit { write: UnitWrite::Pmu { counting_started: true }, context_refreshed: true });
    // The instructions before the WRMSR were counted while IA32_PERF_GLOBAL_CTRL still held 0;
    // the cycle counters caught up after the write.
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::CountTo { ip: 0x104, global_ctrl: 0 }, Call::CountCycles]);
    assert_eq!(f.pmu.read(IA32_PERF_GLOBAL_CTRL), Ok(1 << 32));
    assert_eq!(f.tracer.context(), f.ctx, "counting started: the context the counters filter on was read");
    // A write the PMU refuses (GLOBAL_STATUS is read-only): #GP(0), and the cycles still catch up.
    f.calls.clear();
    assert_eq!(f.wrmsr(&map, IA32_PERF_GLOBAL_STATUS, 0, 0x106), Wrmsr::Gp);
    assert_eq!(
        f.calls,
        vec![
            Call::StoreHeld,
            Call::CountTo { ip: 0x106, global_ctrl: 1 << 32 },
            Call::Gp { insn: MsrInsn::Wrmsr, rcx: u64::from(IA32_PERF_GLOBAL_STATUS), rdx: 0 },
            Call::CountCycles
        ]
    );
}

#[test]
fn a_write_to_an_msr_qemu_owns_does_nothing_but_note_where_the_apic_page_moved() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    assert_eq!(f.wrmsr(&map, IA32_EFER, 0xD01, 0x500), Wrmsr::Qemu);
    assert!(f.calls.is_empty(), "no output step, no counting, no #GP: {:?}", f.calls);
    // IA32_APIC_BASE: QEMU executes it; output must avoid the page at its new base.
    assert_eq!(f.wrmsr(&map, IA32_APIC_BASE, 0x1_FEC0_0900, 0x502), Wrmsr::Qemu);
    assert_eq!(f.calls, vec![Call::ApicBase(0x1_FEC0_0900)]);
    assert_eq!(f.msrs.read(IA32_RTIT_CTL, &map.caps), Ok(0));
    assert!(f.tracer.output().is_empty() && f.stored.is_empty());
    // Atom RTIT's index on a part without RTIT is QEMU's too.
    assert_eq!(f.wrmsr(&map, RTIT_CTL_ATOM, 1, 0x504), Wrmsr::Qemu);
}

#[test]
fn atom_rtit_takes_its_msrs_and_faults_intel_pts_on_silvermont() {
    let map = MsrMap { caps: PtCaps::MINIMAL, rtit: true, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake };
    let mut f = Fake::new(map.caps, PmuCaps::SILVERMONT);
    f.rtit = Some(RtitTracer::new(RtitOptions::default(), Context::KERNEL64));
    // Seed 002: RTIT_CTL is written only after it was read; the refused write raises #GP(0) and
    // the output step still follows.
    assert_eq!(f.wrmsr(&map, RTIT_CTL_ATOM, 0, 0x600), Wrmsr::Gp);
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Gp { insn: MsrInsn::Wrmsr, rcx: u64::from(RTIT_CTL_ATOM), rdx: 0 }, Call::Drain]);
    f.calls.clear();
    f.rtit.as_ref().unwrap().try_rdmsr(RTIT_CTL_ATOM).unwrap();
    assert_eq!(f.wrmsr(&map, RTIT_CTL_ATOM, 0, 0x602), Wrmsr::Rtit);
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Drain]);
    f.calls.clear();
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES, 0x602), Wrmsr::Gp, "no Intel PT on Silvermont");
    assert_eq!(f.calls, vec![Call::StoreHeld, Call::Gp { insn: MsrInsn::Wrmsr, rcx: u64::from(IA32_RTIT_CTL), rdx: 0 }]);
}

// The output step's store ------------------------------------------------------------------------

/// A ToPA table at 20000H (SDM §33.2.7.2 Figure 33-2): `entries` (4 KiB regions at 30000H,
/// 31000H, ... with these low bits: [2] INT, [4] STOP, [1] reserved), then END back to the table.
/// Tracing is enabled with ToPA output.
fn topa_tracing(entries: &[u64]) -> (Fake, MsrMap) {
    use pttrace_core::guest_mem::GuestMemory;
    const TABLE: u64 = 0x20000;
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    f.mem.add_ram(TABLE, 0x1000).add_ram(0x30000, 0x1000 * entries.len());
    for (i, &low) in entries.iter().enumerate() {
        f.mem.write_u64(TABLE + 8 * i as u64, 0x30000 + 0x1000 * i as u64 | low).unwrap();
    }
    f.mem.write_u64(TABLE + 8 * entries.len() as u64, TABLE | 1).unwrap();
    assert_eq!(f.wrmsr(&map, IA32_RTIT_OUTPUT_BASE, TABLE, 0x1000), Wrmsr::Pt(WriteEffect::Plain));
    assert_eq!(f.wrmsr(&map, IA32_RTIT_OUTPUT_MASK_PTRS, 0x7F, 0x1002), Wrmsr::Pt(WriteEffect::Plain));
    // IA32_RTIT_CTL[8] ToPA.
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES | (1 << 8), 0x1004), Wrmsr::Pt(WriteEffect::TraceEnabled));
    f.calls.clear();
    (f, map)
}

/// Indirect JMPs alternating between two far-apart targets (a 6-byte TIP each) until `total`
/// bytes were generated since tracing started.
fn generate_until(f: &mut Fake, total: usize) {
    let mut i = 0u64;
    while f.stored.len() + f.tracer.output().len() < total {
        let target = if i % 2 == 0 { 0x7FFF_0000_0000 + 16 * i } else { 0x1000 + 16 * i };
        f.tracer.branch(0x2000, 0x2002, BranchKind::IndirectJump, target);
        i += 1;
    }
}

#[test]
fn a_store_that_fills_a_topa_region_with_int_raises_the_pmi_and_global_status_55() {
    // Region 0 INT = 1, region 1 STOP = 1.
    let (mut f, _) = topa_tracing(&[1 << 2, 1 << 4]);
    generate_until(&mut f, 0x1000 - 1);
    f.drain();
    assert_eq!(f.calls, vec![Call::Drain], "region 0 not full yet");
    assert_eq!(f.pmu.read(IA32_PERF_GLOBAL_STATUS).unwrap() & (1 << 55), 0);
    generate_until(&mut f, 0x1000 + 100);
    f.drain();
    assert_eq!(f.calls, vec![Call::Drain, Call::Drain, Call::Pmi]);
    // IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI.
    assert_eq!(f.pmu.read(IA32_PERF_GLOBAL_STATUS).unwrap() & (1 << 55), 1 << 55);
    assert!(f.output_active && f.tracer.trace_en() && f.lost == 0);
    assert_eq!(f.mem.bytes(0x30000, f.stored.len()), f.stored, "regions 0 and 1 hold the stream");
    // Region 1 (STOP, no INT) fills: Stopped, no second PMI, the rest lost.
    f.calls.clear();
    generate_until(&mut f, 0x2000 + 100);
    let generated = f.stored.len() + f.tracer.output().len();
    f.drain();
    assert_eq!(f.calls, vec![Call::Drain]);
    assert_eq!(f.stored.len(), 0x2000);
    assert_eq!(f.lost, generated - 0x2000);
    assert_eq!(f.msrs.read(IA32_RTIT_STATUS, &PtCaps::SKYLAKE).unwrap() & (1 << 5), 1 << 5, "IA32_RTIT_STATUS[5] Stopped");
    assert!(f.output_active, "STOP leaves the output unit (its pointers) as they are");
}

#[test]
fn a_store_that_reaches_a_reserved_topa_entry_stops_the_output_with_status_error_and_no_pmi() {
    // Region 0 without INT; entry 1 with reserved bit [1] set (a ToPA error, §33.3.10).
    let (mut f, _) = topa_tracing(&[0, 1 << 1]);
    generate_until(&mut f, 0x1000 + 100);
    let generated = f.stored.len() + f.tracer.output().len();
    f.drain();
    assert_eq!(f.calls, vec![Call::Drain]);
    assert!(!f.output_active, "the output unit stopped");
    assert_eq!(f.stored.len(), 0x1000);
    assert_eq!(f.lost, generated - 0x1000);
    assert_eq!(f.msrs.read(IA32_RTIT_STATUS, &PtCaps::SKYLAKE).unwrap() & (1 << 4), 1 << 4, "IA32_RTIT_STATUS[4] Error");
    assert_eq!(f.pmu.read(IA32_PERF_GLOBAL_STATUS).unwrap() & (1 << 55), 0);
}

// The output hand-off (`system_cpu::output`) ------------------------------------------------------

impl Fake {
    /// The plugin's output step at a block boundary (`flush`: TraceEn cleared), with the host
    /// copy into `stored`.
    fn output_step(&mut self, flush: bool) {
        let mut bytes = Vec::new();
        output::output_step(self, flush, |b| bytes.extend_from_slice(b));
        self.stored.extend(bytes);
    }

    /// The plugin's store before a trace MSR is read or written.
    fn store_held_now(&mut self) {
        let mut bytes = Vec::new();
        output::store_held(self, |b| bytes.extend_from_slice(b));
        self.stored.extend(bytes);
    }
}

/// Tracing into the single range at `RANGE`, the enable's PSB+ stored.
fn single_range_tracing() -> Fake {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    with_range(&mut f, &map);
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES, 0x1000), Wrmsr::Pt(WriteEffect::TraceEnabled));
    assert!(f.tracer.output().is_empty() && !f.stored.is_empty());
    f.calls.clear();
    f
}

#[test]
fn a_few_bytes_stay_held_at_block_boundaries_and_reach_the_range_before_an_msr_access() {
    let mut f = single_range_tracing();
    let before = f.stored.len();
    generate_until(&mut f, before + 100);
    let held = f.tracer.output().len();
    f.output_step(false);
    f.output_step(false);
    assert_eq!(f.tracer.output().len(), held, "held back, not stored");
    assert_eq!(f.stored.len(), before, "nothing stored");
    assert_eq!(f.mem.bytes(RANGE + before as u64, held), vec![0; held], "nothing reached the range");
    assert_eq!(f.handoff.held_blocks(), 2);
    f.store_held_now();
    assert!(f.tracer.output().is_empty());
    assert_eq!(f.stored.len(), before + held);
    assert_eq!(f.mem.bytes(RANGE, f.stored.len()), f.stored);
    assert_eq!(f.handoff.held_blocks(), 0);
}

#[test]
fn a_flush_stores_the_bytes_a_block_boundary_would_hold() {
    let mut f = single_range_tracing();
    let before = f.stored.len();
    generate_until(&mut f, before + 10);
    f.output_step(true);
    assert!(f.tracer.output().is_empty());
    assert_eq!(f.mem.bytes(RANGE, f.stored.len()), f.stored);
    assert!(f.stored.len() > before);
}

#[test]
fn four_kib_held_are_stored_at_the_next_block_boundary() {
    let mut f = single_range_tracing();
    let before = f.stored.len();
    generate_until(&mut f, before + output::OUTPUT_HOLD_BYTES as usize - 1);
    f.output_step(false);
    assert_eq!(f.stored.len(), before, "one byte short: held");
    generate_until(&mut f, before + output::OUTPUT_HOLD_BYTES as usize);
    let held = f.tracer.output().len();
    f.output_step(false);
    assert!(f.tracer.output().is_empty(), "stored");
    assert_eq!(f.stored.len(), before + held);
}

#[test]
fn bytes_that_would_cross_a_topa_int_region_end_are_stored_at_once_and_raise_the_pmi_at_that_boundary() {
    // Region 0 INT = 1, region 1 STOP = 1 (4 KiB each): the quiet room is what fits in region 0.
    let (mut f, _) = topa_tracing(&[1 << 2, 1 << 4]);
    let before = f.stored.len(); // the enable's PSB+
    generate_until(&mut f, 0x1000 - 1);
    f.output_step(false);
    assert!(f.calls.is_empty() && f.stored.len() == before, "held: still within region 0 (its last byte free)");
    generate_until(&mut f, 0x1000 + 10);
    f.output_step(false);
    assert_eq!(f.calls, vec![Call::Pmi], "the ToPA PMI at the boundary the region filled at");
    assert!(f.tracer.output().is_empty() && f.stored.len() >= 0x1000 + 10);
    assert_eq!(f.mem.bytes(0x30000, f.stored.len()), f.stored);
}

#[test]
fn after_an_output_error_nothing_is_stored_and_every_byte_generated_is_counted_lost() {
    // Region 0 without INT; entry 1 with reserved bit [1] set (a ToPA error, §33.3.10).
    let (mut f, _) = topa_tracing(&[0, 1 << 1]);
    generate_until(&mut f, 0x1000 + 100);
    let generated = f.stored.len() + f.tracer.output().len();
    f.output_step(false);
    assert!(!f.output_active, "the output unit stopped");
    assert_eq!(f.stored.len(), 0x1000);
    assert_eq!(f.handoff.lost_after_stop(), (generated - 0x1000) as u64, "what did not fit is lost");
    assert!(f.tracer.output().is_empty());
    f.tracer.branch(0x2000, 0x2002, BranchKind::IndirectJump, 0x7FFF_0000_0000);
    assert!(f.tracer.output().is_empty(), "the error ended packet generation");
    f.output_step(true);
    f.store_held_now();
    assert_eq!(f.stored.len(), 0x1000);
}

#[test]
fn bytes_held_when_the_output_unit_stops_are_lost_at_the_next_step_even_a_flush() {
    let mut f = single_range_tracing();
    let before = f.stored.len();
    generate_until(&mut f, before + 100);
    let held = f.tracer.output().len();
    // The output unit stopped with bytes still in the tracer (they were generated before the
    // stop reached the output step).
    f.output_active = false;
    f.store_held_now();
    assert_eq!(f.tracer.output().len(), held, "an MSR access stores nothing either");
    f.output_step(true);
    assert!(f.tracer.output().is_empty());
    assert_eq!(f.handoff.lost_after_stop(), held as u64);
    assert_eq!(f.stored.len(), before);
    assert_eq!(f.mem.bytes(RANGE + before as u64, held), vec![0; held], "nothing written");
}

// RDMSR ------------------------------------------------------------------------------------------

const IA32_RTIT_CR3_MATCH: u32 = 0x572;
const IA32_MISC_ENABLE: u32 = 0x1A0;
/// MSR_LBR_TOS (model-specific LBR stack).
const MSR_LBR_TOS: u32 = 0x1C9;

impl Fake {
    /// RDMSR of `index` at `ip` decided; RDX holds `rdx` (the guest's, restored with a #GP).
    fn rdmsr(&mut self, map: &MsrMap, index: u32, rdx: u64, ip: u64) -> Rdmsr {
        self.regs[Reg::Rcx as usize] = 0xFFFF_FFFF_0000_0000 | u64::from(index); // RCX[63:32] is ignored
        self.regs[Reg::Rdx as usize] = rdx;
        rdmsr::rdmsr(self, map, ip)
    }

    /// QEMU executed the RDMSR with this answer; then the facade's fix-up.
    fn rdmsr_executed(&mut self, map: &MsrMap, fixup: Fixup, qemu: u64) -> Option<u64> {
        self.regs[Reg::Rax as usize] = qemu & 0xFFFF_FFFF;
        self.regs[Reg::Rdx as usize] = qemu >> 32;
        rdmsr::complete(self, map, fixup)
    }
}

#[test]
fn rdmsr_of_msrs_the_profile_lacks_raises_gp_before_executing_with_rcx_and_rdx_to_restore() {
    // IA32_RTIT_CR3_MATCH without CPUID.(14H,0):EBX[0] CR3 filtering (SDM §33.2.8.6); an
    // IA32_RTIT_* index on Silvermont (Atom RTIT instead of Intel PT); MSR_LBR_TOS on a part with
    // Arch LBR.
    let minimal = MsrMap { caps: PtCaps::MINIMAL, rtit: false, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake };
    let silvermont = MsrMap { caps: PtCaps::MINIMAL, rtit: true, bts: true, pebs_data_cfg: false, arch_lbr: false, lbr: LbrLayout::Skylake };
    let arch_lbr = MsrMap { caps: PtCaps::SAPPHIRE_RAPIDS, arch_lbr: true, ..skylake() };
    for (map, index) in [(minimal, IA32_RTIT_CR3_MATCH), (silvermont, IA32_RTIT_CTL), (arch_lbr, MSR_LBR_TOS)] {
        let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
        assert_eq!(f.rdmsr(&map, index, 0x1234, 0x700), Rdmsr::Gp, "{index:#x}");
        assert_eq!(f.calls, vec![Call::Gp { insn: MsrInsn::Rdmsr, rcx: 0xFFFF_FFFF_0000_0000 | u64::from(index), rdx: 0x1234 }]);
        assert!(f.reg_writes.is_empty(), "{index:#x}: no result");
    }
    // The same indices present: no #GP, the model answers.
    let mut f = Fake::new(PtCaps::SKYLAKE, PmuCaps::SKYLAKE);
    assert_eq!(f.rdmsr(&skylake(), IA32_RTIT_CR3_MATCH, 0, 0x700), Rdmsr::Fixup(Fixup::Owned(IA32_RTIT_CR3_MATCH)));
    assert_eq!(f.rdmsr(&skylake(), MSR_LBR_TOS, 0, 0x700), Rdmsr::Fixup(Fixup::Owned(MSR_LBR_TOS)));
    assert!(f.calls.is_empty());
}

#[test]
fn rdmsr_of_output_mask_ptrs_while_tracing_returns_the_offset_after_every_byte_generated() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    with_range(&mut f, &map);
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, CTL_TRACE_OS_BRANCHES, 0x1000), Wrmsr::Pt(WriteEffect::TraceEnabled));
    let at_enable = f.stored.len();
    // An indirect JMP: a TIP generated and held back (not in the range yet).
    f.tracer.branch(0x1010, 0x1012, BranchKind::IndirectJump, 0x2345);
    let held = f.tracer.output().len();
    assert!(held > 0);
    f.calls.clear();
    let fixup = match f.rdmsr(&map, IA32_RTIT_OUTPUT_MASK_PTRS, 0, 0x2000) {
        Rdmsr::Fixup(fixup) => fixup,
        other => panic!("{other:?}"),
    };
    assert!(f.calls.is_empty(), "nothing before QEMU's read: {:?}", f.calls);
    // TCG reads an MSR it does not know as 0.
    let value = f.rdmsr_executed(&map, fixup, 0);
    assert_eq!(f.calls, vec![Call::StoreHeld]);
    assert_eq!(f.stored.len(), at_enable + held);
    assert_eq!(f.mem.bytes(RANGE, f.stored.len()), f.stored);
    // [63:32] OutputOffset: every byte generated; [31:7] MaskOrTableOffset and [6:0] as written.
    let expected = ((at_enable + held) as u64) << 32 | 0xFFF;
    assert_eq!(value, Some(expected));
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 0xFFF), (Reg::Rdx, (at_enable + held) as u64)]);
}

#[test]
fn rdmsr_of_a_counter_counts_the_instructions_before_it_and_returns_the_counter_in_edx_eax() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    // IA32_PMC0 written as 32 bits, sign-extended to 48 (SDM Vol. 3B §20.2.6).
    f.pmu.write(IA32_PMC0, 0x8000_0010).unwrap();
    let fixup = match f.rdmsr(&map, IA32_PMC0, 0, 0x800) {
        Rdmsr::Fixup(fixup) => fixup,
        other => panic!("{other:?}"),
    };
    assert_eq!(f.calls, vec![Call::CountTo { ip: 0x800, global_ctrl: f.pmu.read(IA32_PERF_GLOBAL_CTRL).unwrap() }]);
    assert_eq!(f.rdmsr_executed(&map, fixup, 0), Some(0xFFFF_8000_0010));
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 0x8000_0010), (Reg::Rdx, 0xFFFF)]);
}

#[test]
fn rdmsr_of_misc_enable_keeps_qemus_bits_and_reports_bts_and_pebs_as_the_profile_has_them() {
    // QEMU's value with IA32_MISC_ENABLE[11] BTS Unavailable and [12] PEBS Unavailable set, and
    // other bits (fast strings [0], TCC [3], perfmon [7], ..., [34] XD disable).
    let qemu = 0x4_0000_1889;
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    assert_eq!(f.rdmsr(&map, IA32_MISC_ENABLE, 0, 0x900), Rdmsr::Fixup(Fixup::MiscEnable));
    assert!(f.calls.is_empty());
    assert_eq!(f.rdmsr_executed(&map, Fixup::MiscEnable, qemu), Some(0x4_0000_0089), "BTS and PEBS available");
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 0x89), (Reg::Rdx, 0x4)]);
    // A PMU without PEBS (Silvermont's): [12] set; QEMU's [11] cleared (the Debug Store exists).
    let mut f = Fake::new(map.caps, PmuCaps::SILVERMONT);
    assert_eq!(f.rdmsr_executed(&map, Fixup::MiscEnable, 0x4_0000_0889), Some(0x4_0000_1089));
    assert!(f.calls.is_empty(), "no output step, no counting: {:?}", f.calls);
    // Without the Debug Store (bts=0) the MSR is QEMU's alone.
    let no_ds = MsrMap { bts: false, ..skylake() };
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    assert_eq!(f.rdmsr(&no_ds, IA32_MISC_ENABLE, 0, 0x900), Rdmsr::Qemu);
    assert!(f.calls.is_empty() && f.reg_writes.is_empty());
}

#[test]
fn rdmsr_of_an_msr_qemu_owns_is_left_to_qemu() {
    let map = skylake();
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE);
    for index in [IA32_EFER, IA32_APIC_BASE, RTIT_CTL_ATOM] {
        assert_eq!(f.rdmsr(&map, index, 0, 0xA00), Rdmsr::Qemu, "{index:#x}");
    }
    assert!(f.calls.is_empty() && f.reg_writes.is_empty());
}

// CPUID ------------------------------------------------------------------------------------------

/// The Skylake profile's CPUID answers (`profile=skylake`, `bts=1`), with the fake's PMU.
fn skylake_cpuid(f: &mut Fake) -> CpuidProfile {
    let opts = SystemOptions::parse(["profile=skylake", "bts=1"]).unwrap();
    opts.cpuid_profile(f.pmu.caps())
}

impl Fake {
    /// CPUID of `leaf`, `subleaf` about to execute: the leaf the facade reads from EAX and ECX.
    fn cpuid(&mut self, leaf: u32, subleaf: u32) -> (u32, u32) {
        self.regs[Reg::Rax as usize] = 0xFFFF_FFFF_0000_0000 | u64::from(leaf); // RAX[63:32] is ignored
        self.regs[Reg::Rcx as usize] = 0xFFFF_FFFF_0000_0000 | u64::from(subleaf);
        cpuid::leaf(self)
    }

    /// QEMU executed the CPUID and answered {EAX, EBX, ECX, EDX} = `qemu`; then the fix-up.
    fn cpuid_executed(&mut self, profile: &CpuidProfile, (leaf, subleaf): (u32, u32), qemu: [u32; 4]) -> [u32; 4] {
        for (reg, v) in [Reg::Rax, Reg::Rbx, Reg::Rcx, Reg::Rdx].into_iter().zip(qemu) {
            self.regs[reg as usize] = u64::from(v);
        }
        cpuid::complete(self, profile, leaf, subleaf)
    }
}

#[test]
fn cpuid_14h_subleaf_0_on_skylake_writes_the_three_registers_qemu_answered_differently() {
    let mut f = Fake::new(PtCaps::SKYLAKE, PmuCaps::SKYLAKE);
    let profile = skylake_cpuid(&mut f);
    let leaf = f.cpuid(0x14, 0);
    assert_eq!(leaf, (0x14, 0));
    // QEMU's -cpu without Intel PT answers leaf 14H with zeros. A Skylake client part
    // (i7-6700K): EAX = 1 (max subleaf), EBX = 0FH (CR3 filter, PSB/CYC, IP filter, MTC), ECX = 7
    // (ToPA, multiple ToPA entries, single range), EDX = 0.
    assert_eq!(f.cpuid_executed(&profile, leaf, [0; 4]), [1, 0xF, 7, 0]);
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 1), (Reg::Rbx, 0xF), (Reg::Rcx, 7)], "EDX was right already");
    assert!(f.calls.is_empty());
}

#[test]
fn cpuid_7_sets_intel_pt_and_leaves_the_rest_of_qemus_answer() {
    let mut f = Fake::new(PtCaps::SKYLAKE, PmuCaps::SKYLAKE);
    let profile = skylake_cpuid(&mut f);
    let leaf = f.cpuid(7, 0);
    // QEMU's EBX without [25] Intel PT, ECX without [16] LA57: only EBX changes.
    let qemu = [0, 0x009C_6FBF, 0x0040_0004, 0xAC00_0400];
    assert_eq!(f.cpuid_executed(&profile, leaf, qemu), [0, 0x029C_6FBF, 0x0040_0004, 0xAC00_0400]);
    assert_eq!(f.reg_writes, vec![(Reg::Rbx, 0x029C_6FBF)]);
    // Subleaf 1 of leaf 7 is QEMU's.
    f.reg_writes.clear();
    let leaf = f.cpuid(7, 1);
    assert_eq!(leaf, (7, 1));
    assert_eq!(f.cpuid_executed(&profile, leaf, [0x10, 0, 0, 0]), [0x10, 0, 0, 0]);
    assert!(f.reg_writes.is_empty());
}

#[test]
fn cpuid_0_raises_the_maximum_leaf_and_the_cpu_remembers_qemus_for_the_leaves_between() {
    let mut f = Fake::new(PtCaps::SKYLAKE, PmuCaps::SKYLAKE);
    let profile = skylake_cpuid(&mut f);
    // QEMU's maximum basic leaf 0DH ("GenuineIntel" in EBX, EDX, ECX): 15H for Intel PT's leaf
    // 14H and the TSC/ART ratio of leaf 15H (MTC).
    let leaf = f.cpuid(0, 0);
    assert_eq!(f.cpuid_executed(&profile, leaf, [0xD, 0x756E_6547, 0x6C65_746E, 0x4965_6E69])[0], 0x15);
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 0x15)]);
    assert_eq!(f.native_leaves.max_leaf, 0xD);
    // Leaf 0EH, above QEMU's maximum: QEMU repeats its highest leaf's values; reserved, all 0.
    f.reg_writes.clear();
    let leaf = f.cpuid(0xE, 0);
    assert_eq!(f.cpuid_executed(&profile, leaf, [7, 8, 9, 10]), [0; 4]);
    assert_eq!(f.reg_writes, vec![(Reg::Rax, 0), (Reg::Rbx, 0), (Reg::Rcx, 0), (Reg::Rdx, 0)]);
}

// RDPMC ------------------------------------------------------------------------------------------

/// The #UD handler's stack (the frame QEMU pushed is at `HANDLER_RSP`) and the IDT.
const HANDLER_RSP: u64 = 0x8000;
const IDT: u64 = 0xA000;
/// IA32_PMC0 and IA32_PERFEVTSEL0.
const IA32_PMC0: u32 = 0xC1;
/// CR0.PE | CR0.ET | CR0.PG; CR4[8] PCE; IA32_EFER LME | LMA.
const CR0_PAGED: u64 = 0x8000_0011;
const CR4_PCE: u64 = 1 << 8;
const EFER_LMA: u64 = 0x500;

/// A CPU in IA-32e mode right after QEMU delivered #UD for an RDPMC of user code at 401000H
/// (RFLAGS ZF, PF and IF set): the handler runs at CPL 0 on `HANDLER_RSP`.
fn at_ud_of_user_rdpmc(cr4: u64, ecx: u64) -> Fake {
    let mut f = Fake::new(PtCaps::SKYLAKE, PmuCaps::SKYLAKE)
        .with(Reg::Rsp, HANDLER_RSP)
        .with(Reg::Cs, 0x10)
        .with(Reg::Ss, 0x18)
        .with(Reg::Cr0, CR0_PAGED)
        .with(Reg::Cr4, cr4)
        .with(Reg::Efer, EFER_LMA)
        .with(Reg::Rcx, ecx)
        // The #UD went through an interrupt gate: IF = 0 in the handler.
        .with(Reg::Rflags, 0x2);
    f.mem.add_ram(0x7000, 0x2000).add_ram(IDT, 0x1000);
    // RIP, CS, RFLAGS, RSP, SS of the user code.
    for (i, v) in [0x40_1000, 0x33, 0x246, 0x7FFF_F000, 0x2B].into_iter().enumerate() {
        use pttrace_core::guest_mem::GuestMemory;
        f.mem.write_u64(HANDLER_RSP + 8 * i as u64, v).unwrap();
    }
    f
}

/// An IA-32e IDT gate (SDM Vol. 3A Figure 6-8): `ty` 0xE interrupt gate, 0xF trap gate.
fn set_gate(f: &mut Fake, vector: u64, offset: u64, ty: u8) {
    use pttrace_core::guest_mem::GuestMemory;
    let mut b = [0u8; 16];
    b[0..2].copy_from_slice(&(offset as u16).to_le_bytes());
    b[2..4].copy_from_slice(&0x10u16.to_le_bytes());
    b[5] = 0x80 | ty;
    b[6..8].copy_from_slice(&((offset >> 16) as u16).to_le_bytes());
    b[8..12].copy_from_slice(&((offset >> 32) as u32).to_le_bytes());
    f.mem.write_phys(IDT + 16 * vector, &b).unwrap();
    f.idt_base = Some(IDT);
}

#[test]
fn user_rdpmc_with_cr4_pce_completes_from_the_counter_and_returns_to_the_user_code() {
    let mut f = at_ud_of_user_rdpmc(CR4_PCE, 0);
    // IA32_PMC0[31:0] written, sign-extended to the 48-bit counter (SDM Vol. 3B §20.2.6).
    f.pmu.write(IA32_PMC0, 0x8765_4321).unwrap();
    let counter = f.pmu.read(IA32_PMC0).unwrap();
    assert_eq!(counter, 0xFFFF_8765_4321);
    assert_eq!(rdpmc::complete(&mut f, 0x40_1002), Rdpmc::Completed);
    assert_eq!(
        f.reg_writes,
        vec![
            (Reg::Cs, 0x33),
            (Reg::Ss, 0x2B),
            (Reg::Rsp, 0x7FFF_F000),
            // The frame's system flags only (IF, bit 1): ZF and PF stay TCG's lazy state.
            (Reg::Rflags, 0x202),
            (Reg::Rip, 0x40_1002),
            (Reg::Rax, 0x8765_4321),
            (Reg::Rdx, 0xFFFF),
        ]
    );
}

#[test]
fn user_rdpmc_with_cr4_pce_clear_keeps_the_gp_qemu_raised() {
    // QEMU's helper_rdpmc raised #GP(0) itself (before its #UD): with gates through which a
    // #UD could be re-delivered, nothing is re-delivered a second time.
    let mut f = at_ud_of_user_rdpmc(0, 0);
    set_gate(&mut f, 6, 0x1000, 0xE);
    set_gate(&mut f, 13, 0x2000, 0xE);
    assert_eq!(rdpmc::complete(&mut f, 0x40_1002), Rdpmc::Unchanged);
    assert!(f.reg_writes.is_empty());
    assert!(!f.mem.writes.iter().any(|&(a, _)| a == HANDLER_RSP - 8), "no error code pushed");
}

#[test]
fn rdpmc_of_a_counter_the_pmu_lacks_is_redelivered_as_gp_with_error_code_0() {
    // ECX = 8: Skylake has 4 general-purpose counters per thread.
    for (gp_type, eflags) in [(0xE, 0x2), (0xF, 0x202)] {
        let mut f = at_ud_of_user_rdpmc(CR4_PCE, 8);
        {
            use pttrace_core::guest_mem::GuestMemory;
            f.mem.write_u64(HANDLER_RSP - 8, 0xAAAA).unwrap();
        }
        set_gate(&mut f, 6, 0xFFFF_FFFF_8100_1000, 0xE);
        set_gate(&mut f, 13, 0xFFFF_FFFF_8100_2000, gp_type);
        assert_eq!(rdpmc::complete(&mut f, 0x40_1002), Rdpmc::Gp(0xFFFF_FFFF_8100_2000));
        // Same selector: CS is not written. An interrupt gate leaves IF = 0, a trap gate the
        // interrupted code's IF = 1.
        assert_eq!(f.reg_writes, vec![(Reg::Rsp, HANDLER_RSP - 8), (Reg::Rflags, eflags), (Reg::Rip, 0xFFFF_FFFF_8100_2000)]);
        assert_eq!(f.mem.bytes(HANDLER_RSP - 8, 8), vec![0; 8], "error code 0 below the frame");
    }
}

#[test]
fn rdpmc_whose_counter_faults_stays_a_ud_when_gp_cannot_be_delivered_the_same_way() {
    // Outside IA-32e mode, without an IDT, or with #GP on another stack (IST 1).
    let mut legacy = at_ud_of_user_rdpmc(CR4_PCE, 8).with(Reg::Efer, 0);
    set_gate(&mut legacy, 6, 0x1000, 0xE);
    set_gate(&mut legacy, 13, 0x2000, 0xE);
    assert_eq!(rdpmc::complete(&mut legacy, 0x40_1002), Rdpmc::Unchanged);
    let mut no_idt = at_ud_of_user_rdpmc(CR4_PCE, 8);
    assert_eq!(rdpmc::complete(&mut no_idt, 0x40_1002), Rdpmc::Unchanged);
    let mut ist = at_ud_of_user_rdpmc(CR4_PCE, 8);
    set_gate(&mut ist, 6, 0x1000, 0xE);
    set_gate(&mut ist, 13, 0x2000, 0xE);
    {
        use pttrace_core::guest_mem::GuestMemory;
        ist.mem.write_phys(IDT + 16 * 13 + 4, &[1]).unwrap();
    }
    assert_eq!(rdpmc::complete(&mut ist, 0x40_1002), Rdpmc::Unchanged);
    for f in [legacy, no_idt, ist] {
        assert!(f.reg_writes.is_empty());
        assert!(!f.mem.writes.iter().any(|&(a, _)| a == HANDLER_RSP - 8), "no error code pushed");
    }
}

// Event Trace at an event's delivery ----------------------------------------------------------------

/// The #PF and timer handlers.
const PF_HANDLER: u64 = 0xFFFF_FFFF_8100_0E00;
const TIMER_HANDLER: u64 = 0xFFFF_FFFF_8100_4000;

/// Sapphire Rapids' Intel PT (Event Trace, CPUID.(14H,0):EBX[7]) tracing ring 0 with
/// IA32_RTIT_CTL[31] EventEn, RFLAGS.IF = 0 at the enable; the IDT with #PF (14) and vector 40H
/// gates, in IA-32e mode; the handler's stack at `HANDLER_RSP` holding `frame` (from RSP up).
fn event_tracing(event_en: bool, frame: &[u64]) -> Fake {
    use pttrace_core::guest_mem::GuestMemory;
    let map = MsrMap { caps: PtCaps::SAPPHIRE_RAPIDS, ..skylake() };
    // RFLAGS.IF = 0 at the enable.
    let mut f = Fake::new(map.caps, PmuCaps::SKYLAKE).with(Reg::Efer, EFER_LMA).with(Reg::Rsp, HANDLER_RSP).with(Reg::Rflags, 0x2);
    f.mem.add_ram(0x7000, 0x2000).add_ram(IDT, 0x1000);
    with_range(&mut f, &map);
    let ctl = CTL_TRACE_OS_BRANCHES | (u64::from(event_en) << 31);
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, ctl, 0x40_1000), Wrmsr::Pt(WriteEffect::TraceEnabled));
    set_gate(&mut f, 14, PF_HANDLER, 0xE);
    set_gate(&mut f, 0x40, TIMER_HANDLER, 0xE);
    for (i, &v) in frame.iter().enumerate() {
        f.mem.write_u64(HANDLER_RSP + 8 * i as u64, v).unwrap();
    }
    // In the handler: RFLAGS.IF = 0 (the interrupt gate cleared it).
    f.with(Reg::Rflags, 0x2).with(Reg::Cr2, 0x8000_0040)
}

/// The packets of an IRET at 401FF0H returning to 402000H (retired right before the event, as the
/// flow reports it after the delivery) and of the event at `handler`.
fn iret_then_event_packets(f: &mut Fake, why: AsyncKind, handler: u64) -> Vec<Packet> {
    f.tracer.clear_output();
    f.tracer.cfe_iret(0x40_1FF0);
    f.tracer.far_transfer(FarKind::Iret, 0x40_2000, Context::KERNEL64);
    f.tracer.async_event(why, handler, Context::KERNEL64);
    PacketDecoder::new(f.tracer.output()).map(|d| d.expect("decodes").packet).collect()
}

/// The Event Trace packets among `p`: CFE, EVD and MODE.Exec (with its IF).
fn event_view(p: Vec<Packet>) -> Vec<Packet> {
    p.into_iter().filter(|x| matches!(x, Packet::Cfe { .. } | Packet::Evd { .. } | Packet::ModeExec { .. })).collect()
}

const CFE_IRET: Packet = Packet::Cfe { ip: true, kind: 2, vector: 0 };
const IF_1: Packet = Packet::ModeExec { mode: ExecMode::Bit64, if_flag: true };
const IF_0: Packet = Packet::ModeExec { mode: ExecMode::Bit64, if_flag: false };
const EVD_CR2: Packet = Packet::Evd { kind: 0, payload: 0x8000_0040 };

#[test]
fn a_page_fault_reports_vector_14_cr2_and_the_if_the_frame_holds_above_its_error_code() {
    // The #PF frame: error code, RIP, CS (bit 9 clear), RFLAGS, RSP, SS. The IRET retired just
    // before the fault restored the frame's IF (RFLAGS[9]); the gate cleared it in the handler.
    let mut f = event_tracing(true, &[0x2, 0x40_2000, 0x10, 0x246, 0x7F00, 0x18]);
    assert_eq!(event::delivered(&mut f, PF_HANDLER, true), Some(14));
    let p = iret_then_event_packets(&mut f, AsyncKind::Fault { ip: 0x40_2000 }, PF_HANDLER);
    assert_eq!(event_view(p), [CFE_IRET, IF_1, EVD_CR2, Packet::Cfe { ip: false, kind: 1, vector: 14 }, IF_0]);
    // IF = 0 in the frame: no change to report at the IRET nor in the handler.
    let mut f = event_tracing(true, &[0x2, 0x40_2000, 0x10, 0x46, 0x7F00, 0x18]);
    assert_eq!(event::delivered(&mut f, PF_HANDLER, true), Some(14));
    let p = iret_then_event_packets(&mut f, AsyncKind::Fault { ip: 0x40_2000 }, PF_HANDLER);
    assert_eq!(event_view(p), [CFE_IRET, EVD_CR2, Packet::Cfe { ip: false, kind: 1, vector: 14 }]);
}

#[test]
fn an_interrupt_reports_its_vector_without_cr2_and_the_if_of_a_frame_without_error_code() {
    // Vector 40H's frame: RIP, CS, RFLAGS, RSP (7F00H: bit 9 set), SS; CR2 holds a stale value.
    let mut f = event_tracing(true, &[0x40_2000, 0x10, 0x46, 0x7F00, 0x18]);
    assert_eq!(event::delivered(&mut f, TIMER_HANDLER, false), Some(0x40));
    let p = iret_then_event_packets(&mut f, AsyncKind::Interrupt { resume_ip: 0x40_2000 }, TIMER_HANDLER);
    assert_eq!(event_view(p), [CFE_IRET, Packet::Cfe { ip: false, kind: 1, vector: 0x40 }]);
    let mut f = event_tracing(true, &[0x40_2000, 0x10, 0x246, 0x7F00, 0x18]);
    assert_eq!(event::delivered(&mut f, TIMER_HANDLER, false), Some(0x40));
    let p = iret_then_event_packets(&mut f, AsyncKind::Interrupt { resume_ip: 0x40_2000 }, TIMER_HANDLER);
    assert_eq!(event_view(p), [CFE_IRET, IF_1, Packet::Cfe { ip: false, kind: 1, vector: 0x40 }, IF_0]);
}

#[test]
fn without_event_en_or_a_gate_at_the_handler_no_vector_is_reported() {
    let frame = [0x40_2000, 0x10, 0x246, 0x7F00, 0x18];
    let mut f = event_tracing(false, &frame);
    assert_eq!(event::delivered(&mut f, TIMER_HANDLER, false), None);
    let p = iret_then_event_packets(&mut f, AsyncKind::Interrupt { resume_ip: 0x40_2000 }, TIMER_HANDLER);
    assert!(event_view(p).iter().all(|x| matches!(x, Packet::ModeExec { if_flag: false, .. })), "no CFE, EVD or IF");
    // EventEn = 1, but no gate points at the handler: no CFE(INTR) and the frame's IF is not
    // read; the handler's IF (here 1, a trap gate's) is still reported with the event.
    let mut f = event_tracing(true, &frame).with(Reg::Rflags, 0x202);
    assert_eq!(event::delivered(&mut f, 0xFFFF_FFFF_8100_9990, false), None);
    let p = iret_then_event_packets(&mut f, AsyncKind::Interrupt { resume_ip: 0x40_2000 }, 0xFFFF_FFFF_8100_9990);
    assert_eq!(event_view(p), [CFE_IRET, IF_1]);
}

// The delivery of an interrupt (`system_cpu::discontinuity::before_delivery`) ---------------------

#[test]
fn an_interrupt_that_ends_a_hlt_sends_pwrx_and_event_trace_before_its_fup_and_tip_at_the_delivery_time() {
    use pttrace_core::system_cpu::discontinuity;
    // Event Trace as above, with IA32_RTIT_CTL[4] PwrEvtEn; the timer's frame holds IF = 1.
    let map = MsrMap { caps: PtCaps::SAPPHIRE_RAPIDS, ..skylake() };
    let mut f = event_tracing(true, &[0x40_2000, 0x10, 0x246, 0x7F00, 0x18]);
    let ctl = CTL_TRACE_OS_BRANCHES | (1 << 31) | (1 << 4);
    f.wrmsr(&map, IA32_RTIT_CTL, 0, 0x40_1000);
    assert_eq!(f.wrmsr(&map, IA32_RTIT_CTL, ctl, 0x40_1000), Wrmsr::Pt(WriteEffect::TraceEnabled));
    f.tracer.set_tsc(5);
    f.tracer.halt(0x40_1FFF);
    f.tracer.clear_output();
    discontinuity::before_delivery(&mut f, TIMER_HANDLER, false);
    assert_eq!(f.tracer.tsc(), 1_000_000, "the port's guest TSC at the delivery");
    f.tracer.async_event(AsyncKind::Interrupt { resume_ip: 0x40_2000 }, TIMER_HANDLER, Context::KERNEL64);
    let p: Vec<Packet> = PacketDecoder::new(f.tracer.output()).map(|d| d.expect("decodes").packet).collect();
    let wake = p.iter().position(|x| matches!(x, Packet::Pwrx { .. })).expect("PWRX");
    let cfe = p.iter().position(|x| matches!(x, Packet::Cfe { vector: 0x40, .. })).expect("CFE(INTR, 40H)");
    let fup = p.iter().position(|x| matches!(x, Packet::Fup(_))).expect("FUP");
    assert!(wake < cfe && cfe < fup, "{p:?}");
    // Nothing woke without a HLT: no second PWRX.
    f.tracer.clear_output();
    discontinuity::before_delivery(&mut f, TIMER_HANDLER, false);
    f.tracer.async_event(AsyncKind::Interrupt { resume_ip: 0x40_2000 }, TIMER_HANDLER, Context::KERNEL64);
    assert!(!PacketDecoder::new(f.tracer.output()).any(|d| matches!(d.expect("decodes").packet, Packet::Pwrx { .. })));
}
