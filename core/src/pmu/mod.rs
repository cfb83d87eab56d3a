//! The counting performance-monitoring unit (SDM Vol. 3B §20.2 "Architectural Performance
//! Monitoring", versions 2 to 4; §20.2.6 full-width writes; §20.2.4 version 4's
//! GLOBAL_STATUS_RESET/SET/INUSE and streamlined freeze).
//!
//! - `evtsel`: IA32_PERFEVTSELx and IA32_FIXED_CTR_CTRL as typed registers.
//! - `events`: the modelled events and what each retired instruction contributes.
//! - [`Pmu`]: the counters and control MSRs of one logical processor, their #GP rules (pure
//!   checks), RDPMC, and counting: `retire(n, what, cpl)` adds `n` retired instructions of one
//!   kind in bulk (the instructions of a translation block before its last are plain), `cycles`
//!   adds clock cycles. Overflow sets the counter's IA32_PERF_GLOBAL_STATUS bit and, with INT /
//!   PMI, asks the caller to raise the PMI through LVTPC; freeze on PMI (IA32_DEBUGCTL[12]) clears
//!   IA32_PERF_GLOBAL_CTRL (versions 2-3) or sets GLOBAL_STATUS.CTR_Frz (version 4).
//!
//! Counting costs nothing while no counter is enabled: `active()` is false and the caller need
//! not report retirements at all.

pub mod events;
pub mod evtsel;
pub mod tally;

pub use events::{Event, Retired};
pub use evtsel::{FixedCtrCtrl, PerfEvtSel};

use crate::pt::msr::Fault;

/// Most general-purpose / fixed counters the MSR ranges below hold.
pub const MAX_GP: usize = 8;
pub const MAX_FIXED: usize = 4;

pub const IA32_PMC0: u32 = 0xC1;
pub const IA32_PERFEVTSEL0: u32 = 0x186;
pub const IA32_FIXED_CTR0: u32 = 0x309;
pub const IA32_PERF_CAPABILITIES: u32 = 0x345;
pub const IA32_FIXED_CTR_CTRL: u32 = 0x38D;
pub const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
pub const IA32_PERF_GLOBAL_CTRL: u32 = 0x38F;
/// IA32_PERF_GLOBAL_STATUS_RESET in version 4, IA32_PERF_GLOBAL_OVF_CTRL before.
pub const IA32_PERF_GLOBAL_STATUS_RESET: u32 = 0x390;
pub const IA32_PERF_GLOBAL_STATUS_SET: u32 = 0x391;
pub const IA32_PERF_GLOBAL_INUSE: u32 = 0x392;
/// Full-width aliases of IA32_PMCx (with PERF_CAPABILITIES[13]).
pub const IA32_A_PMC0: u32 = 0x4C1;
/// IA32_PEBS_ENABLE (SDM Vol. 4 Table 2-20 for Skylake 06_5EH): [3:0] PEBS_EN_PMCn,
/// [35:32] LL_EN_PMCn (load latency; accepted and kept, the model has no memory events).
pub const IA32_PEBS_ENABLE: u32 = 0x3F1;
/// MSR_PEBS_DATA_CFG (SDM Vol. 3B "Adaptive PEBS", Vol. 4 for 06_7EH): the groups of an
/// adaptive PEBS record, [0] Memory Info, [1] GPRs, [2] XMMs, [3] LBRs, [31:24] LBR entries - 1;
/// exists with PEBS format 4 and PERF_CAPABILITIES[14] PEBS_BASELINE.
pub const MSR_PEBS_DATA_CFG: u32 = 0x3F2;

/// IA32_PERF_GLOBAL_STATUS bits besides the counters' overflow bits.
pub const STATUS_TRACE_TOPA_PMI: u64 = 1 << 55;
pub const STATUS_LBR_FRZ: u64 = 1 << 58;

/// How far (in cycles) a cycle counter with INT must be from overflow for its counts to be
/// taken in batches (`Pmu::blocks_before_pmi`): 2^40 cycles, minutes of guest time at any
/// clock rate the model reports, against the microseconds a batch of blocks spans.
pub const CYCLES_BATCH_MARGIN: u64 = 1 << 40;
pub const STATUS_CTR_FRZ: u64 = 1 << 59;
pub const STATUS_ASCI: u64 = 1 << 60;
pub const STATUS_OVF_UNCORE: u64 = 1 << 61;
pub const STATUS_OVF_BUFFER: u64 = 1 << 62;
pub const STATUS_COND_CHGD: u64 = 1 << 63;

/// IA32_PERF_CAPABILITIES[13] FW_WRITE: full-width writes through IA32_A_PMCx.
pub const PERF_CAP_FW_WRITE: u64 = 1 << 13;
/// IA32_PERF_CAPABILITIES[6] PEBS_TRAP: trap-like PEBS records (the IP field is the instruction
/// after the one that triggered the record, the registers are those after it).
pub const PERF_CAP_PEBS_TRAP: u64 = 1 << 6;
/// IA32_PERF_CAPABILITIES[7] PEBS_ARCH_REG: the records hold the architectural registers.
pub const PERF_CAP_PEBS_ARCH_REG: u64 = 1 << 7;
/// IA32_PERF_CAPABILITIES[14] PEBS_BASELINE: every counter (GP and fixed) supports PEBS, any
/// event, and the records are adaptive (MSR_PEBS_DATA_CFG; format 4).
pub const PERF_CAP_PEBS_BASELINE: u64 = 1 << 14;

/// MSR_PEBS_DATA_CFG as a typed register.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PebsDataCfg(pub u64);

impl PebsDataCfg {
    reg_flag!(mem_info, set_mem_info, 0, "[0] Memory Info group (data address, aux, latency, TSX)");
    reg_flag!(gprs, set_gprs, 1, "[1] GPRs group (RFLAGS, IP, RAX..R15)");
    reg_flag!(xmms, set_xmms, 2, "[2] XMMs group (XMM0-XMM15)");
    reg_flag!(lbrs, set_lbrs, 3, "[3] LBRs group");
    reg_field!(lbr_entries_m1, set_lbr_entries_m1, 24, 8, "[31:24] LBR entries - 1");
    /// Bits software may set; any other #GP(0) (as KVM's `pebs_data_cfg_mask = ~0xff00000f`,
    /// which it lets through to the hardware register).
    pub const WRITABLE: u64 = 0xFF00_000F;
}

/// The PMU a full-system profile models (Silvermont's comes with `profile=silvermont`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PmuProfile {
    /// Skylake 06_5EH (the default, `minimal` and `sapphirerapids` profiles).
    #[default]
    Skylake,
    /// Ice Lake 06_7EH (`profile=icelake`): version 5, adaptive PEBS.
    Icelake,
    /// Nehalem 06_1AH (`profile=nehalem`): version 3, the enhanced PEBS record (format 1).
    Nehalem,
    /// Core 2 Penryn 06_17H (`profile=core2`): version 2, the original 144-byte PEBS record
    /// (format 0) on IA32_PMC0.
    Core2,
}

impl PmuProfile {
    /// The part's model-specific LBR stack: Core 2's 4 entries at 40H/60H (`crate::lbr`,
    /// `LbrLayout::Core`), the Skylake-class stack otherwise (Nehalem keeps the model's
    /// Skylake-class stack, README "Nehalem profile").
    pub fn lbr_layout(self) -> crate::lbr::LbrLayout {
        match self {
            PmuProfile::Core2 => crate::lbr::LbrLayout::Core,
            PmuProfile::Skylake | PmuProfile::Icelake | PmuProfile::Nehalem => crate::lbr::LbrLayout::Skylake,
        }
    }

    /// The part's PMU; PEBS only with `pebs` (`pebs=1`).
    pub fn caps(self, pebs: bool) -> PmuCaps {
        let c = match self {
            PmuProfile::Skylake => PmuCaps::SKYLAKE,
            PmuProfile::Icelake => PmuCaps::ICELAKE,
            PmuProfile::Nehalem => PmuCaps::NEHALEM,
            PmuProfile::Core2 => PmuCaps::CORE2,
        };
        if pebs {
            c
        } else {
            PmuCaps { pebs_format: None, ..c }
        }
    }
}

/// What a part's PMU looks like (CPUID leaf 0AH, PERF_CAPABILITIES).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PmuCaps {
    pub version: u8,
    pub num_gp: u8,
    pub num_fixed: u8,
    /// Counter width in bits (GP and fixed).
    pub width: u8,
    /// CPUID.1:ECX[15] PDCM: IA32_PERF_CAPABILITIES exists.
    pub pdcm: bool,
    /// IA32_PERF_CAPABILITIES[13] FW_WRITE: IA32_A_PMCx take full-width values.
    pub full_width_writes: bool,
    /// The part has Intel PT's ToPA PMI (GLOBAL_STATUS[55]).
    pub topa_pmi: bool,
    /// IA32_PERF_CAPABILITIES[5:0] LBR format (5: FROM/TO addresses, LBR_INFO; 1: 64-bit linear
    /// addresses, Core 2's stack; `crate::lbr::LbrLayout::perf_cap_format`).
    pub lbr_format: u8,
    /// PEBS record format (IA32_PERF_CAPABILITIES[11:8]; trap-like, architectural registers),
    /// IA32_PEBS_ENABLE and IA32_MISC_ENABLE[12] = 0; None: no PEBS.
    pub pebs_format: Option<u8>,
    /// IA32_PERF_CAPABILITIES[14] PEBS_BASELINE with format 4: adaptive records
    /// (MSR_PEBS_DATA_CFG, IA32_PERFEVTSELx[34] / IA32_FIXED_CTR_CTRL[32+4i] Adaptive_Record),
    /// PEBS on the fixed counters (IA32_PEBS_ENABLE[32+i]).
    pub pebs_baseline: bool,
}

impl PmuCaps {
    /// Skylake client 06_5EH: perfmon version 4, 4 GP counters per thread, 3 fixed counters,
    /// 48 bits, full-width writes.
    pub const SKYLAKE: PmuCaps =
        PmuCaps { version: 4, num_gp: 4, num_fixed: 3, width: 48, pdcm: true, full_width_writes: true, topa_pmi: true, lbr_format: 5, pebs_format: Some(3), pebs_baseline: false };
    /// Ice Lake client 06_7EH: architectural perfmon version 5 (AnyThread deprecated,
    /// CPUID.0AH:ECX fixed-counter bitmap), 8 GP counters per logical processor, 48 bits,
    /// full-width writes, 32 model-specific LBRs with LBR_INFO (format 5), adaptive PEBS
    /// (format 4 with PEBS_BASELINE). The part's fourth fixed counter (TOPDOWN.SLOTS, with
    /// PERF_METRICS) is not modelled and so not enumerated: 3 fixed counters (ECX = 7).
    pub const ICELAKE: PmuCaps = PmuCaps {
        version: 5,
        num_gp: 8,
        num_fixed: 3,
        width: 48,
        pdcm: true,
        full_width_writes: true,
        topa_pmi: true,
        lbr_format: 5,
        pebs_format: Some(4),
        pebs_baseline: true,
    };
    /// Nehalem 06_1AH (Core i7-920, `profile=nehalem`; SDM Vol. 3B "Performance Monitoring for
    /// Processors Based on Intel Microarchitecture Code Name Nehalem", Vol. 4 Table 2-15):
    /// architectural perfmon version 3, 4 GP counters, 3 fixed counters, 48 bits; PEBS on the
    /// four GP counters (IA32_PEBS_ENABLE[3:0], LL_EN_PMCn [35:32]; seed 001 §6.5.7: "Nehalem
    /// 微架构及后续架构支持 4 个 IA32_PMC0 到 IA32_PMC3 计数器产生 PEBS"), PERF_CAPABILITIES
    /// format 1: the enhanced 176-byte record, trap-like, with the architectural registers. No
    /// FW_WRITE (from Sandy Bridge on; no IA32_A_PMCx). The LBR format reported is the model's
    /// stack (5), not Nehalem's 16-entry format 3 (README "Nehalem profile"); GLOBAL_STATUS[55]
    /// stays because the profile keeps the model's Intel PT.
    pub const NEHALEM: PmuCaps = PmuCaps {
        version: 3,
        num_gp: 4,
        num_fixed: 3,
        width: 48,
        pdcm: true,
        full_width_writes: false,
        topa_pmi: true,
        lbr_format: 5,
        pebs_format: Some(1),
        pebs_baseline: false,
    };
    /// Core 2 Duo E8400, Penryn 06_17H (`profile=core2`; SDM Vol. 3B "Performance Monitoring for
    /// Processors Based on Intel Core Microarchitecture", Vol. 4 the Core 2 MSR table):
    /// architectural perfmon version 2 (no AnyThread, GLOBAL_OVF_CTRL, legacy freeze), 2 GP
    /// counters and 3 fixed counters of 40 bits: CPUID.0AH = {07280202H, 0, 0, 503H} on Penryn
    /// (early Merom steppings report EDX = 0, hence Linux's "v2 perfmon does not report
    /// fixed-purpose events" quirk). PEBS on IA32_PMC0 only (§"Setting up the PEBS Buffer": "PEBS
    /// is available using IA32_PMC0 only"; IA32_PEBS_ENABLE[0]), PERF_CAPABILITIES format 0: the
    /// 144-byte record (RFLAGS, RIP, RAX..R15; seed 001 §6.7: "最初的 Core 架构 64 位 PEBS 记录是
    /// 144 个字节"). [6] PEBS_TRAP is set: Penryn's records are trap-like (Linux 6.1 prints
    /// `pebs_trap ? '+' : '-'` and Penryn boots print "PEBS fmt0+, Core2 events"; only early Merom
    /// steppings print "fmt0-", and Linux disables PEBS on all of Merom). [7] is "always 1" on the
    /// Intel Core microarchitecture. No FW_WRITE. [5:0] LBR format 1 (64-bit linear addresses)
    /// for Core 2's 4-entry stack at 40H/60H (`crate::lbr::LbrLayout::Core`, which says what was
    /// and was not established about the value); GLOBAL_STATUS[55] stays because the profile
    /// keeps the model's Intel PT.
    pub const CORE2: PmuCaps = PmuCaps {
        version: 2,
        num_gp: 2,
        num_fixed: 3,
        width: 40,
        pdcm: true,
        full_width_writes: false,
        topa_pmi: true,
        lbr_format: crate::lbr::LbrLayout::Core.perf_cap_format(),
        pebs_format: Some(0),
        pebs_baseline: false,
    };
    /// Silvermont 06_4DH: version 3, 2 GP counters, 3 fixed, 40 bits.
    pub const SILVERMONT: PmuCaps =
        PmuCaps { version: 3, num_gp: 2, num_fixed: 3, width: 40, pdcm: false, full_width_writes: false, topa_pmi: false, lbr_format: 0, pebs_format: None, pebs_baseline: false };

    fn mask(&self) -> u64 {
        (1u64 << self.width) - 1
    }

    fn counter_bits(&self) -> u64 {
        ((1u64 << self.num_gp) - 1) | (((1u64 << self.num_fixed) - 1) << 32)
    }

    /// CPUID.0AH {EAX, EBX, ECX, EDX} (SDM Vol. 2A Table 3-8): EAX version, GP counters, width,
    /// EBX length 7; EBX bit set = event unavailable: LLC references (3) and LLC misses (4) are
    /// not modelled; EDX fixed counters and their width. Version 5 (§20.2.5): ECX the bitmap of
    /// the fixed counters, EDX[15] AnyThread deprecation (the model has one thread per core, so
    /// AnyThread never had an effect).
    pub fn cpuid_0a(&self) -> [u32; 4] {
        let eax = u32::from(self.version) | (u32::from(self.num_gp) << 8) | (u32::from(self.width) << 16) | (7 << 24);
        let ebx = (1 << 3) | (1 << 4);
        let mut edx = u32::from(self.num_fixed) | (u32::from(self.width) << 5);
        let mut ecx = 0;
        if self.version >= 5 {
            ecx = (1 << self.num_fixed) - 1;
            edx |= 1 << 15;
        }
        [eax, ebx, ecx, edx]
    }

    /// PEBS with adaptive records (format 4 + PEBS_BASELINE).
    pub fn adaptive_pebs(&self) -> bool {
        self.pebs_baseline && self.pebs_format.is_some_and(|f| f >= 4)
    }

    /// IA32_PERF_CAPABILITIES (with PDCM): FW_WRITE, the LBR format and, with PEBS, trap-like records with
    /// the architectural registers in the profile's format: Skylake 06_5EH reads 0x33C5; the model
    /// reads 0x23C5, without [12] SMM_FREEZE (no SMM freeze is modelled, and with it
    /// IA32_DEBUGCTL[14] FREEZE_WHILE_SMM would have to be writable).
    pub fn perf_capabilities(&self) -> Option<u64> {
        let mut pebs = self.pebs_format.map_or(0, |f| PERF_CAP_PEBS_TRAP | PERF_CAP_PEBS_ARCH_REG | (u64::from(f) << 8));
        if self.adaptive_pebs() {
            pebs |= PERF_CAP_PEBS_BASELINE;
        }
        let fw = if self.full_width_writes { PERF_CAP_FW_WRITE } else { 0 };
        self.pdcm.then_some(fw | pebs | u64::from(self.lbr_format))
    }

    /// Bits of IA32_PEBS_ENABLE software may set: PEBS_EN_PMCn and LL_EN_PMCn of each GP
    /// counter; with PEBS_BASELINE PEBS_EN_PMCn and PEBS_EN_FIXEDi (bit 32 + i; KVM's
    /// `pebs_enable_mask = counter_mask` for baseline parts, Linux sets no LL_EN bit from
    /// version 5 on); format 0 (Intel Core microarchitecture) only [0] "Enable PEBS on PMC0"
    /// (no load latency facility); the rest #GP (None: the MSR does not exist).
    pub fn pebs_enable_bits(&self) -> Option<u64> {
        let gp = (1u64 << self.num_gp) - 1;
        if self.adaptive_pebs() {
            return Some(self.counter_bits());
        }
        if self.pebs_format == Some(0) {
            return Some(1);
        }
        self.pebs_format.map(|_| gp | (gp << 32))
    }

    /// IA32_PERFEVTSELx bits that #GP: [34] Adaptive_Record is defined with PEBS_BASELINE.
    fn evtsel_reserved(&self) -> u64 {
        let r = PerfEvtSel::reserved(self.version);
        if self.adaptive_pebs() {
            r & !PerfEvtSel::ADAPTIVE
        } else {
            r
        }
    }

    /// IA32_FIXED_CTR_CTRL bits that #GP: FCi_Adaptive_Record (32 + 4i) with PEBS_BASELINE.
    fn fixed_ctrl_reserved(&self) -> u64 {
        let n = usize::from(self.num_fixed);
        let r = FixedCtrCtrl::reserved(self.version, n);
        if self.adaptive_pebs() {
            (0..n).fold(r, |r, i| r & !FixedCtrCtrl::adaptive_bit(i))
        } else {
            r
        }
    }

    /// Bits of IA32_PERF_GLOBAL_STATUS_RESET (OVF_CTRL) software may write.
    fn reset_bits(&self) -> u64 {
        let mut b = self.counter_bits() | STATUS_OVF_BUFFER | STATUS_COND_CHGD;
        if self.topa_pmi {
            b |= STATUS_TRACE_TOPA_PMI;
        }
        if self.version >= 4 {
            b |= STATUS_LBR_FRZ | STATUS_CTR_FRZ | STATUS_ASCI | STATUS_OVF_UNCORE;
        }
        b
    }

    /// Bits of IA32_PERF_GLOBAL_STATUS_SET (version 4).
    fn set_bits(&self) -> u64 {
        self.reset_bits() & !STATUS_COND_CHGD
    }
}

/// How an enabled counter counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Active {
    /// Position of the counter in the global registers (GP i: i, fixed i: 32 + i).
    bit: u8,
    event: Event,
    os: bool,
    usr: bool,
    int: bool,
    /// IA32_PEBS_ENABLE.PEBS_EN_PMCn (GP counters) / PEBS_EN_FIXEDi (with PEBS_BASELINE).
    pebs: bool,
    /// Adaptive_Record (IA32_PERFEVTSELx[34], IA32_FIXED_CTR_CTRL[32 + 4i]).
    adaptive: bool,
}

/// The PMU of one logical processor.
#[derive(Clone, Debug)]
pub struct Pmu {
    caps: PmuCaps,
    gp: [u64; MAX_GP],
    evtsel: [PerfEvtSel; MAX_GP],
    fixed: [u64; MAX_FIXED],
    fixed_ctrl: FixedCtrCtrl,
    global_ctrl: u64,
    global_status: u64,
    freeze_perfmon_on_pmi: bool,
    freeze_lbrs_on_pmi: bool,
    /// Legacy Freeze_LBRs_On_PMI (versions 2 and 3) took effect: the PMI request cleared
    /// IA32_DEBUGCTL[0] LBR, and the PMI handler sets it again (SDM Vol. 3B §18.4.7 "Freezing
    /// LBR and Performance Counters on PMI", legacy operation, which §18.13.2's streamlined v4
    /// operation replaces; Linux's `__intel_pmu_lbr_enable(pmi)` sets DEBUGCTL.LBR again at the
    /// end of every PMI below version 4: "No need to unfreeze manually, as v4 can do that as part
    /// of the GLOBAL_STATUS ack"). The Debug Store unit keeps DEBUGCTL as written; reads and the
    /// LBR enable see the bit cleared until the next write of DEBUGCTL ([`Pmu::debugctl_read`]).
    lbr_cleared_by_pmi: bool,
    active: Vec<Active>,
    counts_cycles: bool,
    /// A counter with INT overflowed since the last `take_pmi`.
    pmi_pending: bool,
    /// IA32_PEBS_ENABLE.
    pebs_enable: u64,
    /// PEBS-enabled counters that overflowed: the next occurrence of their event writes a record.
    pebs_armed: u64,
    /// Armed counters whose event occurred again: a record is due (`take_pebs`).
    pebs_fired: u64,
    /// MSR_PEBS_DATA_CFG.
    pebs_data_cfg: PebsDataCfg,
}

impl Pmu {
    pub fn new(caps: PmuCaps) -> Self {
        Pmu {
            caps,
            gp: [0; MAX_GP],
            evtsel: [PerfEvtSel(0); MAX_GP],
            fixed: [0; MAX_FIXED],
            fixed_ctrl: FixedCtrCtrl(0),
            // Power-up value (SDM Vol. 4 Table 2-2): the counters are enabled in
            // IA32_PERF_GLOBAL_CTRL, so software only needs the event selects (version 1 style).
            global_ctrl: caps.counter_bits(),
            global_status: 0,
            freeze_perfmon_on_pmi: false,
            freeze_lbrs_on_pmi: false,
            lbr_cleared_by_pmi: false,
            active: Vec::new(),
            counts_cycles: false,
            pmi_pending: false,
            pebs_enable: 0,
            pebs_armed: 0,
            pebs_fired: 0,
            pebs_data_cfg: PebsDataCfg(0),
        }
    }

    pub fn caps(&self) -> PmuCaps {
        self.caps
    }

    /// Some counter is counting: retirements must be reported.
    pub fn active(&self) -> bool {
        !self.active.is_empty()
    }

    /// Some enabled counter counts cycles: the clock must be reported.
    pub fn counts_cycles(&self) -> bool {
        self.counts_cycles
    }

    /// The MSR ranges of the architectural PMU (whether or not this part has every index in
    /// them: one it lacks #GPs).
    pub fn owns(index: u32) -> bool {
        let within = |base: u32, n: usize| (base..base + n as u32).contains(&index);
        within(IA32_PMC0, MAX_GP)
            || within(IA32_A_PMC0, MAX_GP)
            || within(IA32_PERFEVTSEL0, MAX_GP)
            || within(IA32_FIXED_CTR0, MAX_FIXED)
            || index == IA32_PERF_CAPABILITIES
            || index == IA32_PEBS_ENABLE
            || index == MSR_PEBS_DATA_CFG
            || (IA32_FIXED_CTR_CTRL..=IA32_PERF_GLOBAL_INUSE).contains(&index)
    }

    fn gp_index(&self, index: u32, base: u32) -> Option<usize> {
        let i = index.checked_sub(base)? as usize;
        (i < usize::from(self.caps.num_gp)).then_some(i)
    }

    fn fixed_index(&self, index: u32) -> Option<usize> {
        let i = index.checked_sub(IA32_FIXED_CTR0)? as usize;
        (i < usize::from(self.caps.num_fixed)).then_some(i)
    }

    fn is_a_pmc(&self, index: u32) -> bool {
        self.caps.full_width_writes && (IA32_A_PMC0..IA32_A_PMC0 + MAX_GP as u32).contains(&index)
    }

    /// IA32_PERF_GLOBAL_INUSE (version 4): which counters are programmed (event select or
    /// fixed EN non-zero), bit 63 PMI in use.
    fn inuse(&self) -> u64 {
        let mut v = 0;
        for i in 0..usize::from(self.caps.num_gp) {
            if self.evtsel[i].0 & 0xFFFF != 0 {
                v |= 1 << i;
            }
            if self.evtsel[i].int() {
                v |= 1 << 63;
            }
        }
        for i in 0..usize::from(self.caps.num_fixed) {
            if self.fixed_ctrl.en(i) != 0 {
                v |= 1 << (32 + i);
            }
            if self.fixed_ctrl.pmi(i) {
                v |= 1 << 63;
            }
        }
        v
    }

    /// RDMSR: the value, or #GP(0) for an index this part does not have.
    pub fn read(&self, index: u32) -> Result<u64, Fault> {
        if let Some(i) = self.gp_index(index, IA32_PMC0) {
            return Ok(self.gp[i]);
        }
        if self.is_a_pmc(index) {
            return self.gp_index(index, IA32_A_PMC0).map(|i| self.gp[i]).ok_or(Fault::Gp);
        }
        if let Some(i) = self.gp_index(index, IA32_PERFEVTSEL0) {
            return Ok(self.evtsel[i].0);
        }
        if let Some(i) = self.fixed_index(index) {
            return Ok(self.fixed[i]);
        }
        match index {
            IA32_PERF_CAPABILITIES => self.caps.perf_capabilities().ok_or(Fault::Gp),
            IA32_FIXED_CTR_CTRL => Ok(self.fixed_ctrl.0),
            IA32_PERF_GLOBAL_STATUS => Ok(self.global_status),
            IA32_PERF_GLOBAL_CTRL => Ok(self.global_ctrl),
            // A command register: reads 0.
            IA32_PERF_GLOBAL_STATUS_RESET => Ok(0),
            IA32_PERF_GLOBAL_STATUS_SET if self.caps.version >= 4 => Ok(0),
            IA32_PERF_GLOBAL_INUSE if self.caps.version >= 4 => Ok(self.inuse()),
            IA32_PEBS_ENABLE if self.caps.pebs_format.is_some() => Ok(self.pebs_enable),
            MSR_PEBS_DATA_CFG if self.caps.adaptive_pebs() => Ok(self.pebs_data_cfg.0),
            _ => Err(Fault::Gp),
        }
    }

    /// Would WRMSR `index` <- `value` #GP? Pure.
    pub fn check_write(&self, index: u32, value: u64) -> Result<(), Fault> {
        let mask = self.caps.mask();
        let ok = |reserved: u64| if value & reserved == 0 { Ok(()) } else { Err(Fault::Gp) };
        if self.gp_index(index, IA32_PMC0).is_some() {
            return Ok(()); // bits 31:0 sign-extended, EDX ignored (§20.2.6)
        }
        if self.is_a_pmc(index) {
            self.gp_index(index, IA32_A_PMC0).ok_or(Fault::Gp)?;
            return ok(!mask);
        }
        if self.gp_index(index, IA32_PERFEVTSEL0).is_some() {
            return ok(self.caps.evtsel_reserved());
        }
        if self.fixed_index(index).is_some() {
            return ok(!mask);
        }
        match index {
            IA32_FIXED_CTR_CTRL => ok(self.caps.fixed_ctrl_reserved()),
            IA32_PERF_GLOBAL_CTRL => ok(!self.caps.counter_bits()),
            IA32_PERF_GLOBAL_STATUS_RESET => ok(!self.caps.reset_bits()),
            IA32_PERF_GLOBAL_STATUS_SET if self.caps.version >= 4 => ok(!self.caps.set_bits()),
            IA32_PEBS_ENABLE => ok(!self.caps.pebs_enable_bits().ok_or(Fault::Gp)?),
            MSR_PEBS_DATA_CFG if self.caps.adaptive_pebs() => ok(!PebsDataCfg::WRITABLE),
            // GLOBAL_STATUS, INUSE and PERF_CAPABILITIES are read-only.
            _ => Err(Fault::Gp),
        }
    }

    /// WRMSR: [`Pmu::check_write`], then apply. On `Err` nothing changed.
    pub fn write(&mut self, index: u32, value: u64) -> Result<(), Fault> {
        self.check_write(index, value)?;
        let mask = self.caps.mask();
        if let Some(i) = self.gp_index(index, IA32_PMC0) {
            self.gp[i] = (value as u32 as i32 as i64 as u64) & mask;
        } else if let Some(i) = self.gp_index(index, IA32_A_PMC0).filter(|_| self.is_a_pmc(index)) {
            self.gp[i] = value;
        } else if let Some(i) = self.gp_index(index, IA32_PERFEVTSEL0) {
            self.evtsel[i] = PerfEvtSel(value);
        } else if let Some(i) = self.fixed_index(index) {
            self.fixed[i] = value;
        } else {
            match index {
                IA32_FIXED_CTR_CTRL => self.fixed_ctrl = FixedCtrCtrl(value),
                IA32_PERF_GLOBAL_CTRL => self.global_ctrl = value,
                IA32_PERF_GLOBAL_STATUS_RESET => self.global_status &= !value,
                IA32_PERF_GLOBAL_STATUS_SET => self.global_status |= value,
                IA32_PEBS_ENABLE => self.pebs_enable = value,
                MSR_PEBS_DATA_CFG => self.pebs_data_cfg = PebsDataCfg(value),
                _ => {}
            }
        }
        self.refresh();
        Ok(())
    }

    /// RDPMC with ECX = `ecx` (SDM Vol. 2B RDPMC): ECX[30] selects the fixed counters, ECX[31]
    /// a fast read of the low 32 bits (as KVM and P6-era parts); #GP(0) for a counter that does
    /// not exist or when CR4.PCE = 0 at CPL > 0 in protected mode.
    pub fn rdpmc(&self, ecx: u32, cpl: u8, cr4_pce: bool, protected: bool) -> Result<u64, Fault> {
        if protected && cpl > 0 && !cr4_pce {
            return Err(Fault::Gp);
        }
        let index = (ecx & 0x3FFF_FFFF) as usize;
        let value = if ecx & (1 << 30) != 0 {
            (index < usize::from(self.caps.num_fixed)).then(|| self.fixed[index])
        } else {
            (index < usize::from(self.caps.num_gp)).then(|| self.gp[index])
        }
        .ok_or(Fault::Gp)?;
        Ok(if ecx & (1 << 31) != 0 { value & 0xFFFF_FFFF } else { value })
    }

    /// IA32_DEBUGCTL changed: [11] FREEZE_LBRS_ON_PMI, [12] FREEZE_PERFMON_ON_PMI.
    pub fn set_debugctl(&mut self, debugctl: u64) {
        self.freeze_lbrs_on_pmi = debugctl & (1 << 11) != 0;
        self.freeze_perfmon_on_pmi = debugctl & (1 << 12) != 0;
        // The write sets [0] LBR to the value written, whatever a legacy freeze did.
        self.lbr_cleared_by_pmi = false;
    }

    /// A legacy Freeze_LBRs_On_PMI cleared IA32_DEBUGCTL[0] LBR at a PMI, and DEBUGCTL was not
    /// written since.
    pub fn debugctl_lbr_cleared(&self) -> bool {
        self.lbr_cleared_by_pmi
    }

    /// IA32_DEBUGCTL as RDMSR reads it, `written` being the value the Debug Store unit holds:
    /// [0] LBR reads 0 after a legacy Freeze_LBRs_On_PMI.
    pub fn debugctl_read(&self, written: u64) -> u64 {
        if self.lbr_cleared_by_pmi {
            written & !1
        } else {
            written
        }
    }

    /// A ToPA region with INT filled (Intel PT): GLOBAL_STATUS[55].
    pub fn set_topa_pmi(&mut self) {
        self.global_status |= STATUS_TRACE_TOPA_PMI;
    }

    /// The PEBS buffer reached its interrupt threshold: GLOBAL_STATUS[62] OvfBuffer and a PMI
    /// (with freeze on PMI, `take_pmi`).
    pub fn set_ovf_buffer(&mut self) {
        self.global_status |= STATUS_OVF_BUFFER;
        self.pmi_pending = true;
    }

    pub fn global_status(&self) -> u64 {
        self.global_status
    }

    /// IA32_DEBUGCTL[11] FREEZE_LBRS_ON_PMI is set and a PMI was requested since the last
    /// `take_pmi`: the LBR stack is frozen from the request on (SDM Vol. 3B §18.4.7: "the LBR
    /// stack is frozen on a hardware PMI request"), before `take_pmi` sets LBR_Frz and before
    /// the PMI is delivered, so neither the instructions after the overflowing one nor the
    /// PMI's own delivery are recorded.
    pub fn lbr_freeze_requested(&self) -> bool {
        self.pmi_pending && self.freeze_lbrs_on_pmi
    }

    /// Recompute which counters count (after any control write, overflow freeze or unfreeze).
    fn refresh(&mut self) {
        self.active.clear();
        self.counts_cycles = false;
        if self.caps.version >= 4 && self.global_status & STATUS_CTR_FRZ != 0 {
            return;
        }
        for i in 0..usize::from(self.caps.num_gp) {
            let sel = self.evtsel[i];
            if self.global_ctrl & (1 << i) == 0 || !sel.en() {
                continue;
            }
            let Some(event) = Self::gp_event(sel) else { continue };
            let pebs = self.pebs_enable & (1 << i) != 0;
            let adaptive = sel.adaptive();
            self.active.push(Active { bit: i as u8, event, os: sel.os(), usr: sel.usr(), int: sel.int(), pebs, adaptive });
        }
        for i in 0..usize::from(self.caps.num_fixed) {
            if self.global_ctrl & (1 << (32 + i)) == 0 || self.fixed_ctrl.en(i) == 0 {
                continue;
            }
            let Some(event) = Event::fixed(i) else { continue };
            let en = self.fixed_ctrl.en(i);
            // PEBS_EN_FIXEDi exists only with PEBS_BASELINE (before, bit 32 + n is LL_EN_PMCn).
            let pebs = self.caps.adaptive_pebs() && self.pebs_enable & (1 << (32 + i)) != 0;
            let adaptive = self.fixed_ctrl.adaptive(i);
            self.active.push(Active {
                bit: 32 + i as u8,
                event,
                os: en & 1 != 0,
                usr: en & 2 != 0,
                int: self.fixed_ctrl.pmi(i),
                pebs,
                adaptive,
            });
        }
        self.counts_cycles = self.active.iter().any(|a| matches!(a.event, Event::CoreCycles | Event::RefCycles));
        // A counter no longer counting with PEBS is not armed (its next event cannot come).
        let pebs_counting = self.active.iter().filter(|a| a.pebs).fold(0u64, |m, a| m | 1 << a.bit);
        self.pebs_armed &= pebs_counting;
    }

    /// The event a GP counter counts. CMASK/INV (§20.2.1.1): in the model at most one event of
    /// each kind happens per cycle, so CMASK = 1 counts the event itself and INV with CMASK >= 2
    /// ("fewer than CMASK this cycle") every core cycle (Linux's Skylake `cycles:pp` alias
    /// INST_RETIRED.ANY_P, INV = 1, CMASK = 16). Edge detection and the other combinations are
    /// not modelled: such a counter does not count.
    fn gp_event(sel: PerfEvtSel) -> Option<Event> {
        let event = Event::decode(sel.event(), sel.umask())?;
        match (sel.edge(), sel.inv(), sel.cmask()) {
            (false, _, 0) | (false, false, 1) => Some(event),
            (false, true, c) if c >= 2 => Some(Event::CoreCycles),
            _ => None,
        }
    }

    fn counter(&mut self, bit: u8) -> &mut u64 {
        if bit >= 32 {
            &mut self.fixed[usize::from(bit - 32)]
        } else {
            &mut self.gp[usize::from(bit)]
        }
    }

    /// Add `n` events to counter `bit`; true if it overflowed with its interrupt enabled.
    ///
    /// PEBS (SDM Vol. 3B §20.3.1.1.1 / §20.5.3.1 "Processor Event Based Sampling"): the overflow
    /// of a PEBS-enabled counter arms PEBS; the next occurrence of the event after it triggers
    /// the record (`take_pebs`). Events reported in bulk that contain both the overflow and a
    /// later event trigger it too, at an instruction the caller cannot name: the plugin
    /// reports retirements one by one wherever that may happen (`pebs_within`).
    fn add(&mut self, a: Active, n: u64) -> bool {
        let mask = self.caps.mask();
        let bit = 1u64 << a.bit;
        if a.pebs && self.pebs_armed & bit != 0 {
            self.pebs_armed &= !bit;
            self.pebs_fired |= bit;
        }
        let c = self.counter(a.bit);
        let sum = *c + n;
        *c = sum & mask;
        if sum > mask {
            self.global_status |= bit;
            if a.pebs && self.pebs_fired & bit == 0 {
                if sum & mask == 0 {
                    self.pebs_armed |= bit;
                } else {
                    self.pebs_fired |= bit;
                }
            }
            a.int
        } else {
            false
        }
    }

    /// IA32_PEBS_ENABLE.
    pub fn pebs_enable(&self) -> u64 {
        self.pebs_enable
    }

    /// Some counter counts with PEBS: retirements may write records.
    pub fn pebs_active(&self) -> bool {
        self.active.iter().any(|a| a.pebs)
    }

    /// The counters whose PEBS record is due (the record's "applicable counters"), cleared; 0 if
    /// none. The caller writes the record and reloads them (`pebs_reload`).
    pub fn take_pebs(&mut self) -> u64 {
        std::mem::take(&mut self.pebs_fired)
    }

    /// A record is due (not yet taken).
    pub fn pebs_due(&self) -> bool {
        self.pebs_fired != 0
    }

    /// A record is due and may be written at an instruction boundary at `cpl`. A record due
    /// only to cycle counters that do not count at `cpl` (e.g. `cycles:up` with USR only, the
    /// block after the one whose cycles overflowed starting in the kernel after a SYSCALL)
    /// waits for a boundary at a CPL one of them counts at: the event that triggers the assist
    /// is a cycle the counter counts (SDM Vol. 3B §20.3.1.1.1), so its record names user code.
    /// The clock is read per block, so the moment inside the user block is not known; the
    /// record goes to the first boundary back at that CPL. A retirement event's record is
    /// written where it is due (trap-like: the instruction after the trigger, in whatever
    /// ring that is).
    pub fn pebs_due_at(&self, cpl: u8) -> bool {
        let waits = |bit: u8| {
            self.active.iter().find(|a| a.bit == bit).is_some_and(|a| {
                matches!(a.event, Event::CoreCycles | Event::RefCycles) && !(if cpl == 0 { a.os } else { a.usr })
            })
        };
        (0..64u8).filter(|&b| self.pebs_fired >> b & 1 != 0).any(|b| !waits(b))
    }

    /// After a PEBS record: counter `bit` (GP n: n, fixed i: 32 + i) is loaded with the DS
    /// area's reset value for it.
    pub fn pebs_reload(&mut self, bit: usize, value: u64) {
        let mask = self.caps.mask();
        if bit < usize::from(self.caps.num_gp) {
            self.gp[bit] = value & mask;
        } else if (32..32 + usize::from(self.caps.num_fixed)).contains(&bit) {
            self.fixed[bit - 32] = value & mask;
        }
    }

    /// MSR_PEBS_DATA_CFG.
    pub fn pebs_data_cfg(&self) -> PebsDataCfg {
        self.pebs_data_cfg
    }

    /// The groups of the adaptive record for the counters `applicable`: MSR_PEBS_DATA_CFG when
    /// one of them has Adaptive_Record set, else 0 (a basic record). The SDM defines
    /// Adaptive_Record per counter ("If this bit is not set, a basic record is generated"); for a
    /// record shared by counters with and without it the model takes the groups (an assumption).
    pub fn pebs_record_cfg(&self, applicable: u64) -> PebsDataCfg {
        if !self.caps.adaptive_pebs() {
            return PebsDataCfg(0);
        }
        let adaptive = |bit: u64| {
            if bit >= 32 {
                self.fixed_ctrl.adaptive((bit - 32) as usize)
            } else {
                self.evtsel.get(bit as usize).is_some_and(|s| s.adaptive())
            }
        };
        if (0..64).any(|b| applicable & (1 << b) != 0 && adaptive(b)) {
            self.pebs_data_cfg
        } else {
            PebsDataCfg(0)
        }
    }

    /// Could `plain` plain instructions followed by one contributing `last` (if any), all at
    /// `cpl`, trigger a PEBS record before the last one retires (an armed counter sees an event,
    /// or a PEBS counter overflows with events to follow)? Then the caller reports the block's
    /// instructions one by one, so the record names the exact instruction and registers.
    pub fn pebs_within(&self, plain: u64, last: Option<Retired>, cpl: u8) -> bool {
        let mask = self.caps.mask();
        self.pebs_fired != 0
            || self.active.iter().any(|a| {
                let Event::Retirement(req) = a.event else { return false };
                if !a.pebs || !(if cpl == 0 { a.os } else { a.usr }) || req != 0 || plain == 0 {
                    return false;
                }
                let value = if a.bit >= 32 { self.fixed[usize::from(a.bit - 32)] } else { self.gp[usize::from(a.bit)] };
                // Mid-block events only come from instruction events (branches end blocks).
                self.pebs_armed & (1 << a.bit) != 0 || plain + u64::from(last.is_some()) > mask - value
            })
    }

    /// Is a PMI due (a counter with INT / PMI overflowed since the last call)? The caller raises
    /// it; this is the moment of the PMI request, when freeze on PMI acts (§20.2.4.1 legacy: the
    /// PMI clears IA32_PERF_GLOBAL_CTRL; version 4 streamlined freeze: GLOBAL_STATUS.CTR_Frz /
    /// LBR_Frz, unfrozen by writing them to STATUS_RESET). The caller asks after each batch of
    /// retirements it reports together (a translation block), so a block's instructions after
    /// the overflowing one still count, as hardware's PMI skid would.
    pub fn take_pmi(&mut self) -> bool {
        if !std::mem::take(&mut self.pmi_pending) {
            return false;
        }
        if self.caps.version >= 4 {
            if self.freeze_perfmon_on_pmi {
                self.global_status |= STATUS_CTR_FRZ;
            }
            if self.freeze_lbrs_on_pmi {
                self.global_status |= STATUS_LBR_FRZ;
            }
        } else {
            // Legacy freeze (§18.4.7): FREEZE_PERFMON_ON_PMI clears IA32_PERF_GLOBAL_CTRL,
            // FREEZE_LBRS_ON_PMI clears IA32_DEBUGCTL[0] LBR.
            if self.freeze_perfmon_on_pmi {
                self.global_ctrl = 0;
            }
            if self.freeze_lbrs_on_pmi {
                self.lbr_cleared_by_pmi = true;
            }
        }
        self.refresh();
        true
    }

    /// `n` instructions that each contribute `what` retired at `cpl`. Returns true when a
    /// counter with INT / PMI overflowed (then `take_pmi`).
    pub fn retire(&mut self, n: u64, what: Retired, cpl: u8) -> bool {
        if n == 0 || self.active.is_empty() {
            return false;
        }
        let mut pmi = false;
        for k in 0..self.active.len() {
            let a = self.active[k];
            let counts = if cpl == 0 { a.os } else { a.usr };
            if let Event::Retirement(req) = a.event {
                if counts && what.has(req) {
                    pmi |= self.add(a, n);
                }
            }
        }
        self.pmi_pending |= pmi;
        pmi
    }

    /// `delta` clock cycles passed at `cpl` (core and reference cycles).
    pub fn cycles(&mut self, delta: u64, cpl: u8) -> bool {
        if delta == 0 || !self.counts_cycles {
            return false;
        }
        let mut pmi = false;
        for k in 0..self.active.len() {
            let a = self.active[k];
            let counts = if cpl == 0 { a.os } else { a.usr };
            if counts && matches!(a.event, Event::CoreCycles | Event::RefCycles) {
                pmi |= self.add(a, delta);
            }
        }
        self.pmi_pending |= pmi;
        pmi
    }

    /// How many more blocks of at most `max_insns` instructions may retire, at any CPL, before
    /// a counter whose interrupt is enabled could overflow: the blocks an embedder may count in a
    /// batch, later, without moving a PMI to another block (issue 13). A block retires at most
    /// `max_insns` instructions and so at most that many of any retirement event. A counter
    /// with PEBS is bounded the same way whether or not it has INT: its record is written at
    /// the first event after its overflow (trap-like), which must not fall inside a batch. 0
    /// (count every block as it runs) while a PEBS record is armed or due or a PMI is pending.
    /// Cycle counters advance with the clock, not with blocks: one with INT or PEBS counts in
    /// batches only while at least `CYCLES_BATCH_MARGIN` cycles from overflow (perf stat's
    /// counters start 2^47 - 1 away); closer, 0.
    pub fn blocks_before_pmi(&self, max_insns: u64) -> u64 {
        if self.pmi_pending || self.pebs_armed != 0 || self.pebs_fired != 0 {
            return 0;
        }
        let mask = self.caps.mask();
        let mut blocks = u64::MAX;
        for a in self.active.iter().filter(|a| a.int || a.pebs) {
            let value = if a.bit >= 32 { self.fixed[usize::from(a.bit - 32)] } else { self.gp[usize::from(a.bit)] };
            // It overflows when more than `room` events are added.
            let room = mask - value;
            match a.event {
                Event::Retirement(_) => blocks = blocks.min(room / max_insns.max(1)),
                Event::CoreCycles | Event::RefCycles if room < CYCLES_BATCH_MARGIN => return 0,
                Event::CoreCycles | Event::RefCycles => {}
            }
        }
        blocks
    }

    /// Would `plain` plain instructions followed by one contributing `last` (if any), all at
    /// `cpl`, overflow a counter whose interrupt is enabled? (Lets the caller raise the PMI
    /// before a block runs, so that it is taken right after the block.)
    pub fn pmi_within(&self, plain: u64, last: Option<Retired>, cpl: u8) -> bool {
        let mask = self.caps.mask();
        self.active.iter().any(|a| {
            let Event::Retirement(req) = a.event else { return false };
            if !a.int || !(if cpl == 0 { a.os } else { a.usr }) {
                return false;
            }
            let n = if req == 0 { plain } else { 0 } + u64::from(last.is_some_and(|l| l.has(req)));
            let value = if a.bit >= 32 { self.fixed[usize::from(a.bit - 32)] } else { self.gp[usize::from(a.bit)] };
            n > 0 && n > mask - value
        })
    }
}

#[cfg(test)]
mod tests;
