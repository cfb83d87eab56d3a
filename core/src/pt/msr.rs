//! The IA32_RTIT_* MSR file of one logical processor (SDM Vol. 3C §33.2.8 "Enabling and
//! Configuration MSRs"; §36.2.7 in the 2016 edition quoted as "SDM pN" in
//! shared/reference/pt-packets.md), plus the Trace_ToPA_PMI bit 55 of the perfmon global status
//! MSRs (§33.2.7.2 "ToPA PMI").
//!
//! Every register is typed, every write is checked by a pure [`RtitMsrs::check_write`] against the
//! capability profile ([`PtCaps`], i.e. CPUID.(EAX=14H) and MAXPHYADDR) and against the current
//! state, and [`RtitMsrs::write`] applies a checked write and tells the caller whether tracing was
//! switched on or off. The tracer and the output units are not in this file: the caller reacts
//! to [`WriteEffect`], and updates STATUS / OUTPUT_* through the public fields as hardware does.
//!
//! Where the SDM, KVM (arch/x86/kvm/vmx/vmx.c: vmx_rtit_ctl_check, vmx_set_msr, vmx_get_msr) and
//! the reference notes disagree, the comment at the rule says so; the model follows the SDM
//! (what hardware does) unless stated otherwise.

use super::caps::PtCaps;
use super::rtit_ctl::{AddrRange, RtitCtl};

pub use super::rtit_ctl::IA32_RTIT_CTL;

/// IA32_RTIT_OUTPUT_BASE (560H): output region base / current ToPA table base (§33.2.8.7).
pub const IA32_RTIT_OUTPUT_BASE: u32 = 0x560;
/// IA32_RTIT_OUTPUT_MASK_PTRS (561H): mask or ToPA table offset, and output offset (§33.2.8.8).
pub const IA32_RTIT_OUTPUT_MASK_PTRS: u32 = 0x561;
/// IA32_RTIT_STATUS (571H) (§33.2.8.4).
pub const IA32_RTIT_STATUS: u32 = 0x571;
/// IA32_RTIT_CR3_MATCH (572H) (§33.2.8.6).
pub const IA32_RTIT_CR3_MATCH: u32 = 0x572;
/// IA32_RTIT_ADDR0_A (580H); ADDRn_A is 580H + 2n, ADDRn_B is 581H + 2n (§33.2.8.5).
pub const IA32_RTIT_ADDR0_A: u32 = 0x580;
/// IA32_RTIT_ADDR0_B (581H).
pub const IA32_RTIT_ADDR0_B: u32 = 0x581;
/// IA32_RTIT_ADDR1_A (582H).
pub const IA32_RTIT_ADDR1_A: u32 = 0x582;
/// IA32_RTIT_ADDR1_B (583H).
pub const IA32_RTIT_ADDR1_B: u32 = 0x583;
/// IA32_RTIT_ADDR2_A (584H).
pub const IA32_RTIT_ADDR2_A: u32 = 0x584;
/// IA32_RTIT_ADDR2_B (585H).
pub const IA32_RTIT_ADDR2_B: u32 = 0x585;
/// IA32_RTIT_ADDR3_A (586H).
pub const IA32_RTIT_ADDR3_A: u32 = 0x586;
/// IA32_RTIT_ADDR3_B (587H).
pub const IA32_RTIT_ADDR3_B: u32 = 0x587;

/// IA32_PERF_GLOBAL_STATUS (38EH), read-only; bit 55 Trace_ToPA_PMI.
pub const IA32_PERF_GLOBAL_STATUS: u32 = 0x38E;
/// IA32_PERF_GLOBAL_STATUS_RESET (390H), a.k.a. IA32_PERF_GLOBAL_OVF_CTRL: writing 1 to bit 55
/// clears IA32_PERF_GLOBAL_STATUS[55].
pub const IA32_PERF_GLOBAL_STATUS_RESET: u32 = 0x390;
/// Older SDM / Linux name of [`IA32_PERF_GLOBAL_STATUS_RESET`].
pub const IA32_PERF_GLOBAL_OVF_CTRL: u32 = IA32_PERF_GLOBAL_STATUS_RESET;
/// IA32_PERF_GLOBAL_STATUS_SET (391H): writing 1 to bit 55 sets IA32_PERF_GLOBAL_STATUS[55].
pub const IA32_PERF_GLOBAL_STATUS_SET: u32 = 0x391;
/// IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI (same position in _RESET and _SET).
pub const PERF_GLOBAL_STATUS_TRACE_TOPA_PMI: u64 = 1 << 55;

/// Number of IA32_RTIT_ADDRn_A/B pairs the architecture defines.
pub const MAX_ADDR_RANGES: usize = 4;

/// A WRMSR/RDMSR that faults. The only fault an RTIT MSR access raises is #GP(0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// #GP(0)
    Gp,
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Gp => f.write_str("#GP(0)"),
        }
    }
}

impl std::error::Error for Fault {}

/// What an accepted WRMSR did, so the caller can start or stop the tracer and output units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteEffect {
    /// IA32_RTIT_CTL.TraceEn went 0 -> 1 (SDM §33.2.8.3): start packet generation.
    TraceEnabled,
    /// IA32_RTIT_CTL.TraceEn went 1 -> 0: flush every buffered byte to the output and leave the
    /// output MSRs stable before the guest's next instruction.
    TraceDisabled,
    /// Any other accepted write (including rewriting CTL with its current value).
    Plain,
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_STATUS
// ---------------------------------------------------------------------------------------------

/// IA32_RTIT_STATUS as a typed register (SDM §33.2.8.4, Table 33-7 / 2016 Table 36-7).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitStatus(pub u64);

impl RtitStatus {
    /// IA32_RTIT_STATUS[0] FilterEn (read-only: WRMSR ignores it).
    pub const FILTER_EN: u64 = 1 << 0;
    /// IA32_RTIT_STATUS[1] ContextEn (read-only: WRMSR ignores it).
    pub const CONTEXT_EN: u64 = 1 << 1;
    /// IA32_RTIT_STATUS[2] TriggerEn (read-only: WRMSR ignores it).
    pub const TRIGGER_EN: u64 = 1 << 2;
    /// IA32_RTIT_STATUS[4] Error.
    pub const ERROR: u64 = 1 << 4;
    /// IA32_RTIT_STATUS[5] Stopped.
    pub const STOPPED: u64 = 1 << 5;
    /// IA32_RTIT_STATUS[6] PendPSB.
    pub const PEND_PSB: u64 = 1 << 6;
    /// IA32_RTIT_STATUS[7] PendToPAPMI.
    pub const PEND_TOPA_PMI: u64 = 1 << 7;
    /// IA32_RTIT_STATUS[48:32] PacketByteCnt.
    pub const PACKET_BYTE_CNT: u64 = 0x1_FFFF << 32;
    /// IA32_RTIT_STATUS[2:0]: bits the processor owns; "Writes are ignored" (SDM p1704).
    pub const READ_ONLY: u64 = Self::FILTER_EN | Self::CONTEXT_EN | Self::TRIGGER_EN;
    /// IA32_RTIT_STATUS[3], [31:8], [63:49]: reserved on every profile.
    pub const ALWAYS_RESERVED: u64 = (1 << 3) | (0xFF_FFFF << 8) | (0x7FFF << 49);

    crate::reg_flag!(filter_en, set_filter_en, 0, "IA32_RTIT_STATUS[0] FilterEn");
    crate::reg_flag!(
        context_en,
        set_context_en,
        1,
        "IA32_RTIT_STATUS[1] ContextEn"
    );
    crate::reg_flag!(
        trigger_en,
        set_trigger_en,
        2,
        "IA32_RTIT_STATUS[2] TriggerEn"
    );
    crate::reg_flag!(error, set_error, 4, "IA32_RTIT_STATUS[4] Error");
    crate::reg_flag!(stopped, set_stopped, 5, "IA32_RTIT_STATUS[5] Stopped");
    crate::reg_flag!(pend_psb, set_pend_psb, 6, "IA32_RTIT_STATUS[6] PendPSB");
    crate::reg_flag!(
        pend_topa_pmi,
        set_pend_topa_pmi,
        7,
        "IA32_RTIT_STATUS[7] PendToPAPMI"
    );

    /// IA32_RTIT_STATUS[48:32] PacketByteCnt: packet bytes since the last PSB.
    pub fn packet_byte_cnt(self) -> u32 {
        ((self.0 & Self::PACKET_BYTE_CNT) >> 32) as u32
    }

    /// IA32_RTIT_STATUS[48:32] PacketByteCnt. Values wider than 17 bits are truncated.
    pub fn set_packet_byte_cnt(&mut self, v: u32) -> &mut Self {
        self.0 = (self.0 & !Self::PACKET_BYTE_CNT) | ((u64::from(v) << 32) & Self::PACKET_BYTE_CNT);
        self
    }

    /// Bits of IA32_RTIT_STATUS that a WRMSR on this profile may set without #GP.
    ///
    /// SDM Table 33-11 (2016 p1710): PacketByteCnt can be written non-zero only if
    /// CPUID.(EAX=14H,ECX=0):EBX[1] = 1; PendPSB/PendToPAPMI only if EBX[6] = 1 ("Writes can also
    /// set PendToPAPMI and PendPSB"). KVM (MSR_IA32_RTIT_STATUS_MASK) always allows PacketByteCnt
    /// and never PendPSB/PendToPAPMI (it does not virtualise PMI preservation); we follow the SDM.
    pub fn writable_mask(caps: &PtCaps) -> u64 {
        let mut m = Self::READ_ONLY | Self::ERROR | Self::STOPPED;
        if caps.psb_cyc {
            m |= Self::PACKET_BYTE_CNT;
        }
        if caps.psb_pmi_preserve {
            m |= Self::PEND_PSB | Self::PEND_TOPA_PMI;
        }
        m
    }

    /// Bits whose WRMSR to 1 #GPs on this profile.
    pub fn reserved_mask(caps: &PtCaps) -> u64 {
        !Self::writable_mask(caps)
    }
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_OUTPUT_MASK_PTRS
// ---------------------------------------------------------------------------------------------

/// IA32_RTIT_OUTPUT_MASK_PTRS as a typed register (SDM §33.2.8.8, Table 33-9 / 2016 p1706).
/// LowerMask[6:0] is forced to 1 ("Forced to 1, writes are ignored"), so the wrapped value
/// always has bits 6:0 set; construct it with [`OutputMaskPtrs::new`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutputMaskPtrs(u64);

impl Default for OutputMaskPtrs {
    /// Reset value 7FH.
    fn default() -> Self {
        OutputMaskPtrs(Self::LOWER_MASK)
    }
}

impl OutputMaskPtrs {
    /// IA32_RTIT_OUTPUT_MASK_PTRS[6:0] LowerMask.
    pub const LOWER_MASK: u64 = 0x7F;
    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:7] MaskOrTableOffset.
    pub const MASK_OR_TABLE_OFFSET: u64 = 0xFFFF_FF80;
    /// IA32_RTIT_OUTPUT_MASK_PTRS[63:32] OutputOffset.
    pub const OUTPUT_OFFSET: u64 = 0xFFFF_FFFF << 32;

    /// The register as a WRMSR of `raw` leaves it: bits 6:0 forced to 1.
    pub fn new(raw: u64) -> Self {
        OutputMaskPtrs(raw | Self::LOWER_MASK)
    }

    /// The value RDMSR returns (bits 6:0 always 1).
    pub fn value(self) -> u64 {
        self.0
    }

    /// IA32_RTIT_OUTPUT_MASK_PTRS[6:0] LowerMask: always 7FH.
    pub fn lower_mask(self) -> u8 {
        (self.0 & Self::LOWER_MASK) as u8
    }

    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:7] MaskOrTableOffset, shifted down (a 25-bit value).
    /// ToPA: the current entry index in the table (table byte offset = index * 8).
    /// Single range: mask bits 31:7.
    pub fn mask_or_table_offset(self) -> u32 {
        ((self.0 & Self::MASK_OR_TABLE_OFFSET) >> 7) as u32
    }

    /// IA32_RTIT_OUTPUT_MASK_PTRS[31:7] MaskOrTableOffset. Values wider than 25 bits are truncated.
    pub fn set_mask_or_table_offset(&mut self, v: u32) -> &mut Self {
        self.0 = (self.0 & !Self::MASK_OR_TABLE_OFFSET)
            | ((u64::from(v) << 7) & Self::MASK_OR_TABLE_OFFSET);
        self
    }

    /// IA32_RTIT_OUTPUT_MASK_PTRS[63:32] OutputOffset: next write offset in the current region.
    pub fn output_offset(self) -> u32 {
        (self.0 >> 32) as u32
    }

    /// IA32_RTIT_OUTPUT_MASK_PTRS[63:32] OutputOffset.
    pub fn set_output_offset(&mut self, v: u32) -> &mut Self {
        self.0 = (self.0 & !Self::OUTPUT_OFFSET) | (u64::from(v) << 32);
        self
    }

    /// Single-range OutputMask = ZeroExtend64(IA32_RTIT_OUTPUT_MASK_PTRS[31:0]) (§33.2.7.1).
    pub fn single_range_mask(self) -> u64 {
        self.0 & 0xFFFF_FFFF
    }
}

// ---------------------------------------------------------------------------------------------
// IA32_RTIT_CTL reserved bits and encodings for a profile
// ---------------------------------------------------------------------------------------------

/// IA32_RTIT_CTL bits reserved on every profile: [18], [23], [30:28], [54:48], [63:57]
/// (SDM §33.2.8.2, Table 33-6).
pub const CTL_ALWAYS_RESERVED: u64 =
    (1 << 18) | (1 << 23) | (0b111 << 28) | (0x7F << 48) | (0x7F << 57);

const CTL_TRACE_EN: u64 = 1 << 0;
const CTL_CYC_EN: u64 = 1 << 1;
const CTL_OS: u64 = 1 << 2;
const CTL_USER: u64 = 1 << 3;
const CTL_PWR_EVT_EN: u64 = 1 << 4;
const CTL_FUP_ON_PTW: u64 = 1 << 5;
const CTL_FABRIC_EN: u64 = 1 << 6;
const CTL_CR3_FILTER: u64 = 1 << 7;
const CTL_TOPA: u64 = 1 << 8;
const CTL_MTC_EN: u64 = 1 << 9;
const CTL_TSC_EN: u64 = 1 << 10;
const CTL_DIS_RETC: u64 = 1 << 11;
const CTL_PTW_EN: u64 = 1 << 12;
const CTL_BRANCH_EN: u64 = 1 << 13;
const CTL_MTC_FREQ: u64 = 0xF << 14;
const CTL_CYC_THRESH: u64 = 0xF << 19;
const CTL_PSB_FREQ: u64 = 0xF << 24;
const CTL_EVENT_EN: u64 = 1 << 31;
const CTL_DIS_TNT: u64 = 1 << 55;
const CTL_INJECT_PSB_PMI_ON_ENABLE: u64 = 1 << 56;

/// PtCaps has no field for CPUID.(EAX=07H,ECX=0):EBX[25] (Intel PT supported). A profile that
/// enumerates no output scheme at all (no ToPA, no single range, no trace transport) could
/// never trace, so this file treats it as "PT not enumerated": every IA32_RTIT_* access #GPs.
pub fn pt_enumerated(caps: &PtCaps) -> bool {
    caps.topa || caps.single_range || caps.trace_transport
}

/// Number of usable ADDRn pairs: CPUID.(EAX=14H,ECX=1):EAX[2:0] (at most 4 exist), and none
/// unless CPUID.(EAX=14H,ECX=0):EBX[2] (IP filtering / TraceStop) is 1 (SDM Table 33-11).
pub fn addr_range_count(caps: &PtCaps) -> usize {
    if caps.ip_filter {
        usize::from(caps.num_addr_ranges & 7).min(MAX_ADDR_RANGES)
    } else {
        0
    }
}

/// IA32_RTIT_CTL bits that are reserved (#GP when set) on this profile: the always-reserved bits
/// plus every bit whose CPUID capability is absent (SDM Table 33-6 and Table 33-11).
///
/// KVM's update_intel_pt_cfg builds the same mask, except that KVM versions before the 2021 patch
/// "RTIT_CTL_BRANCH_EN has no dependency on other CPUID bit" tied BranchEn to the MTC capability
/// (EBX[3]); the SDM gives BranchEn no CPUID dependency. We follow the SDM.
pub fn ctl_reserved_mask(caps: &PtCaps) -> u64 {
    // TraceEn, OS, User, TSCEn, DisRETC and BranchEn exist whenever PT does.
    let mut allowed = CTL_TRACE_EN | CTL_OS | CTL_USER | CTL_TSC_EN | CTL_DIS_RETC | CTL_BRANCH_EN;
    // CPUID.(EAX=14H,ECX=0):EBX[0] CR3 filtering.
    if caps.cr3_filter {
        allowed |= CTL_CR3_FILTER;
    }
    // EBX[1] configurable PSB and cycle-accurate mode.
    if caps.psb_cyc {
        allowed |= CTL_CYC_EN | CTL_CYC_THRESH | CTL_PSB_FREQ;
    }
    // EBX[3] MTC.
    if caps.mtc {
        allowed |= CTL_MTC_EN | CTL_MTC_FREQ;
    }
    // EBX[4] PTWRITE.
    if caps.ptwrite {
        allowed |= CTL_PTW_EN | CTL_FUP_ON_PTW;
    }
    // EBX[5] power event trace.
    if caps.power_events {
        allowed |= CTL_PWR_EVT_EN;
    }
    // EBX[6] PSB and PMI preservation.
    if caps.psb_pmi_preserve {
        allowed |= CTL_INJECT_PSB_PMI_ON_ENABLE;
    }
    // EBX[7] event trace.
    if caps.event_trace {
        allowed |= CTL_EVENT_EN;
    }
    // EBX[8] TNT disable.
    if caps.dis_tnt {
        allowed |= CTL_DIS_TNT;
    }
    // ECX[0] ToPA: "WRMSR to IA32_RTIT_CTL that sets this bit causes #GP, if ... ECX.TOPA = 0".
    if caps.topa {
        allowed |= CTL_TOPA;
    }
    // ECX[3] trace transport.
    if caps.trace_transport {
        allowed |= CTL_FABRIC_EN;
    }
    // IA32_RTIT_CTL[35+4n:32+4n] ADDRn_CFG exists for n < CPUID.(EAX=14H,ECX=1):EAX[2:0].
    for n in 0..addr_range_count(caps) {
        allowed |= 0xF << (32 + 4 * n);
    }
    !allowed | CTL_ALWAYS_RESERVED
}

fn bitmap_has(bitmap: u16, encoding: u8) -> bool {
    encoding < 16 && bitmap & (1 << encoding) != 0
}

/// The checks of a WRMSR to IA32_RTIT_CTL that depend only on the new value (reserved bits,
/// reserved encodings, output scheme). `old` is the current value (for the TraceEn rule).
fn check_ctl(old: RtitCtl, new: RtitCtl, caps: &PtCaps) -> Result<(), Fault> {
    // SDM §33.2.8.1: "any MSR write that attempts to change bits marked reserved, or utilize
    // encodings marked reserved, will cause a #GP fault."
    if new.0 & ctl_reserved_mask(caps) != 0 {
        return Err(Fault::Gp);
    }

    // §33.2.8.3 "Other Writes to IA32_RTIT_CTL": any attempt to modify IA32_RTIT_CTL while
    // TraceEn is set #GPs unless the same write also clears TraceEn; writing the value it already
    // holds does not #GP. (Older KVM also #GPed a write that cleared TraceEn and changed other
    // bits, until "KVM: VMX: Fix IA32_RTIT_CTL MSR validation logic"; we follow the SDM.)
    if old.trace_en() && new.trace_en() && new != old {
        return Err(Fault::Gp);
    }

    // Unsupported encodings (Table 33-6: "Use of unsupported encodings will result in a #GP
    // fault"; Table 33-12: the CPUID.(EAX=14H,ECX=1) bitmaps). When the capability is absent
    // the field is reserved and was caught above. Encoding 0 is the reset value; we check a
    // field only when it is non-zero or the feature it configures is on (CYCEn for CycThresh,
    // MTCEn for MTCFreq, TraceEn for PSBFreq, which has no enable of its own), so CTL = 0 is
    // always writable. KVM (vmx_rtit_ctl_check) checks the field on every write; the two only
    // differ for a profile whose bitmap lacks bit 0, which no real part enumerates.
    if caps.mtc
        && (new.mtc_en() || new.mtc_freq() != 0)
        && !bitmap_has(caps.mtc_period_bitmap, new.mtc_freq())
    {
        return Err(Fault::Gp);
    }
    if caps.psb_cyc
        && (new.cyc_en() || new.cyc_thresh() != 0)
        && !bitmap_has(caps.cyc_thresh_bitmap, new.cyc_thresh())
    {
        return Err(Fault::Gp);
    }
    if caps.psb_cyc
        && (new.trace_en() || new.psb_freq() != 0)
        && !bitmap_has(caps.psb_freq_bitmap, new.psb_freq())
    {
        return Err(Fault::Gp);
    }

    // ADDRn_CFG: 0 unused, 1 filter, 2 TraceStop, 3..15 reserved (#GP) (Table 33-6).
    for n in 0..addr_range_count(caps) {
        if (new.0 >> (32 + 4 * n)) & 0xF > 2 {
            return Err(Fault::Gp);
        }
    }

    // Table 33-6 ToPA: "WRMSR to IA32_RTIT_CTL that sets TraceEn but clears this bit and FabricEn
    // would cause #GP, if CPUID.(EAX=14H, ECX=0):ECX.SNGLRGNOUT[bit 2] = 0." (ToPA=1 without the
    // ToPA capability is a reserved bit, caught above.)
    if new.trace_en() && !new.topa() && !new.fabric_en() && !caps.single_range {
        return Err(Fault::Gp);
    }
    Ok(())
}

/// 48-bit canonical: bits 63:47 all equal. The model has no 5-level paging; KVM checks against
/// the vCPU's virtual-address width (57 bits with LA57), the SDM only says "properly
/// sign-extended".
pub fn is_canonical_48(v: u64) -> bool {
    (((v << 16) as i64) >> 16) as u64 == v
}

/// Which ADDRn_A/B MSR `index` names: (n, is_b).
fn addr_index(index: u32) -> Option<(usize, bool)> {
    if (IA32_RTIT_ADDR0_A..=IA32_RTIT_ADDR3_B).contains(&index) {
        let k = (index - IA32_RTIT_ADDR0_A) as usize;
        Some((k / 2, k % 2 == 1))
    } else {
        None
    }
}

/// Is `index` one of the IA32_RTIT_* MSRs (whether or not the profile has it)?
pub fn is_rtit_index(index: u32) -> bool {
    matches!(
        index,
        IA32_RTIT_OUTPUT_BASE
            | IA32_RTIT_OUTPUT_MASK_PTRS
            | IA32_RTIT_CTL
            | IA32_RTIT_STATUS
            | IA32_RTIT_CR3_MATCH
    ) || addr_index(index).is_some()
}

fn is_perf_global_index(index: u32) -> bool {
    matches!(
        index,
        IA32_PERF_GLOBAL_STATUS | IA32_PERF_GLOBAL_STATUS_RESET | IA32_PERF_GLOBAL_STATUS_SET
    )
}

/// Does the profile implement the RTIT MSR `index`? (RDMSR and WRMSR of one it lacks #GP.)
fn rtit_msr_exists(index: u32, caps: &PtCaps) -> bool {
    if !pt_enumerated(caps) {
        return false;
    }
    match index {
        IA32_RTIT_CTL | IA32_RTIT_STATUS => true,
        // §33.2.8.7/8: "Accesses to this MSR are supported only if Intel PT output to memory is
        // supported, hence when either CPUID.(EAX=14H, ECX=0):ECX[bit 0] or ... ECX[bit 2] are
        // set. Otherwise WRMSR or RDMSR cause a #GP." (KVM agrees.)
        IA32_RTIT_OUTPUT_BASE | IA32_RTIT_OUTPUT_MASK_PTRS => caps.topa || caps.single_range,
        // Table 33-11 EBX[0] = 0: "any access to IA32_RTIT_CR3_MATCH will #GP". (KVM agrees.)
        IA32_RTIT_CR3_MATCH => caps.cr3_filter,
        // §33.2.8.5: only the pairs CPUID.(EAX=14H,ECX=1):EAX[2:0] enumerates exist.
        _ => matches!(addr_index(index), Some((n, _)) if n < addr_range_count(caps)),
    }
}

// ---------------------------------------------------------------------------------------------
// The MSR file
// ---------------------------------------------------------------------------------------------

/// The IA32_RTIT_* MSRs of one logical processor and IA32_PERF_GLOBAL_STATUS[55].
///
/// Fields are public so the tracer and output units can update what hardware updates
/// (STATUS.FilterEn/ContextEn/TriggerEn/Stopped/Error/PacketByteCnt, OUTPUT_BASE and
/// OUTPUT_MASK_PTRS while tracing, the ToPA PMI bit); guest WRMSRs go through [`RtitMsrs::write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitMsrs {
    /// IA32_RTIT_CTL (570H).
    pub ctl: RtitCtl,
    /// IA32_RTIT_STATUS (571H).
    pub status: RtitStatus,
    /// IA32_RTIT_CR3_MATCH (572H): CR3[63:5] to match; bits 4:0 are zero.
    pub cr3_match: u64,
    /// IA32_RTIT_OUTPUT_BASE (560H): physical address, bits 6:0 zero, below MAXPHYADDR.
    pub output_base: u64,
    /// IA32_RTIT_OUTPUT_MASK_PTRS (561H).
    pub output_mask_ptrs: OutputMaskPtrs,
    /// IA32_RTIT_ADDRn_A / IA32_RTIT_ADDRn_B (580H + 2n / 581H + 2n).
    pub addr: [AddrRange; MAX_ADDR_RANGES],
    /// IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI.
    pub perf_global_status_topa_pmi: bool,
}

impl Default for RtitMsrs {
    fn default() -> Self {
        Self::reset_value()
    }
}

impl RtitMsrs {
    /// Power-on (cold RESET) values: "All configuration MSRs for Intel PT are cleared on a cold
    /// RESET" (§33.2.8.1); OUTPUT_MASK_PTRS reads 7FH because LowerMask is forced to 1.
    pub fn reset_value() -> Self {
        RtitMsrs {
            ctl: RtitCtl(0),
            status: RtitStatus(0),
            cr3_match: 0,
            output_base: 0,
            output_mask_ptrs: OutputMaskPtrs::default(),
            addr: [AddrRange::default(); MAX_ADDR_RANGES],
            perf_global_status_topa_pmi: false,
        }
    }

    /// Which MSR indices this file answers on this profile: the RTIT MSRs the profile implements
    /// (only the ADDRn pairs it enumerates) and, when PT is enumerated, IA32_PERF_GLOBAL_STATUS /
    /// _RESET / _SET for bit 55 (the caller merges those with any counter-overflow bits of its
    /// PMU model).
    ///
    /// On hardware, an RTIT MSR the profile lacks (e.g. ADDR2_A on a 2-range part) still #GPs;
    /// [`RtitMsrs::read`]/[`RtitMsrs::write`] return that #GP. Whether to deliver it or to fall
    /// back to the emulator's default for unknown MSRs is the caller's choice.
    pub fn owns(index: u32, caps: &PtCaps) -> bool {
        rtit_msr_exists(index, caps) || (pt_enumerated(caps) && is_perf_global_index(index))
    }

    /// RDMSR `index`, exactly as hardware reads back.
    ///
    /// Any RTIT MSR the profile does not implement #GPs (all of them when PT is not enumerated).
    /// IA32_PERF_GLOBAL_STATUS returns only bit 55; IA32_PERF_GLOBAL_STATUS_RESET/_SET read as 0
    /// here (write-only command registers; the caller's PMU model decides what RDMSR of them
    /// does). An index outside this file #GPs.
    pub fn read(&self, index: u32, caps: &PtCaps) -> Result<u64, Fault> {
        if is_perf_global_index(index) {
            return Ok(
                if index == IA32_PERF_GLOBAL_STATUS && self.perf_global_status_topa_pmi {
                    PERF_GLOBAL_STATUS_TRACE_TOPA_PMI
                } else {
                    0
                },
            );
        }
        if !rtit_msr_exists(index, caps) {
            return Err(Fault::Gp);
        }
        Ok(match index {
            IA32_RTIT_CTL => self.ctl.0,
            IA32_RTIT_STATUS => self.status.0,
            IA32_RTIT_CR3_MATCH => self.cr3_match,
            IA32_RTIT_OUTPUT_BASE => self.output_base,
            // Bits 6:0 always read 1 (Table 33-9). KVM returns the raw written value instead;
            // Linux always writes 7FH there, so it cannot tell.
            IA32_RTIT_OUTPUT_MASK_PTRS => self.output_mask_ptrs.value(),
            _ => match addr_index(index) {
                Some((n, false)) => self.addr[n].a,
                Some((n, true)) => self.addr[n].b,
                None => return Err(Fault::Gp),
            },
        })
    }

    /// Would WRMSR `index` <- `value` #GP? Pure: looks at the current state, changes nothing.
    pub fn check_write(&self, index: u32, value: u64, caps: &PtCaps) -> Result<(), Fault> {
        match index {
            // Read-only.
            IA32_PERF_GLOBAL_STATUS => return Err(Fault::Gp),
            // Only bit 55 is modelled; the other bits belong to the PMU (counter overflow etc.)
            // and are accepted and ignored here.
            IA32_PERF_GLOBAL_STATUS_RESET | IA32_PERF_GLOBAL_STATUS_SET => return Ok(()),
            _ => {}
        }
        if !rtit_msr_exists(index, caps) {
            return Err(Fault::Gp);
        }
        if index == IA32_RTIT_CTL {
            return check_ctl(self.ctl, RtitCtl(value), caps);
        }
        // STATUS (§33.2.8.4), CR3_MATCH (§33.2.8.6), OUTPUT_BASE (§33.2.8.7), OUTPUT_MASK_PTRS
        // (§33.2.8.8) and ADDRn (§33.2.8.5) "can be written only when IA32_RTIT_CTL.TraceEn is
        // 0; otherwise WRMSR causes a #GP". (KVM: pt_can_write_msr.)
        if self.ctl.trace_en() {
            return Err(Fault::Gp);
        }
        match index {
            // FilterEn/ContextEn/TriggerEn are read-only: "The WRMSR instruction ignores these
            // bits in the source operand (attempts to modify these bits are ignored and do not
            // cause WRMSR to fault)" (§33.2.8.4; Table 33-7 says "Writes are ignored" for all
            // three). KVM accepts them too but stores them (a guest reads back what it wrote);
            // we ignore them as hardware does. Bit 3, 31:8 and 63:49 are reserved; PendPSB /
            // PendToPAPMI and PacketByteCnt are reserved without their capability.
            IA32_RTIT_STATUS => {
                if value & RtitStatus::reserved_mask(caps) != 0 {
                    return Err(Fault::Gp);
                }
            }
            // Bits 4:0 reserved, "an attempt to set those bits using WRMSR causes a #GP". Bits
            // 63:5 hold CR3[63:5]; neither the SDM nor KVM limits them to MAXPHYADDR (and CR3
            // itself may carry non-address bits, e.g. LAM's CR3[62:61]), so we do not either.
            IA32_RTIT_CR3_MATCH => {
                if value & 0x1F != 0 {
                    return Err(Fault::Gp);
                }
            }
            // Table 33-8: bits 6:0 and 63:MAXPHYADDR must be 0. Bits 11:7 of a ToPA table base
            // do not #GP (operational error at enable instead). (KVM: pt_output_base_valid.)
            IA32_RTIT_OUTPUT_BASE => {
                if value & 0x7F != 0 || value & caps.phys_addr_reserved_mask() != 0 {
                    return Err(Fault::Gp);
                }
            }
            // No reserved bits: LowerMask writes are ignored, the rest is MaskOrTableOffset and
            // OutputOffset. Bad masks/offsets are operational errors at enable, not #GP.
            IA32_RTIT_OUTPUT_MASK_PTRS => {}
            // "Writes must ensure that the address is properly sign-extended, otherwise a #GP
            // fault will result."
            _ => {
                if !is_canonical_48(value) {
                    return Err(Fault::Gp);
                }
            }
        }
        Ok(())
    }

    /// WRMSR `index` <- `value`: [`RtitMsrs::check_write`], then apply. On `Err` nothing changed.
    pub fn write(&mut self, index: u32, value: u64, caps: &PtCaps) -> Result<WriteEffect, Fault> {
        self.check_write(index, value, caps)?;
        match index {
            IA32_PERF_GLOBAL_STATUS_RESET => {
                if value & PERF_GLOBAL_STATUS_TRACE_TOPA_PMI != 0 {
                    self.perf_global_status_topa_pmi = false;
                }
            }
            IA32_PERF_GLOBAL_STATUS_SET => {
                if value & PERF_GLOBAL_STATUS_TRACE_TOPA_PMI != 0 && pt_enumerated(caps) {
                    self.perf_global_status_topa_pmi = true;
                }
            }
            IA32_RTIT_CTL => {
                let was = self.ctl.trace_en();
                self.ctl = RtitCtl(value);
                return Ok(match (was, self.ctl.trace_en()) {
                    (false, true) => WriteEffect::TraceEnabled,
                    (true, false) => WriteEffect::TraceDisabled,
                    _ => WriteEffect::Plain,
                });
            }
            IA32_RTIT_STATUS => {
                // Keep the read-only bits; store the writable ones.
                let w = RtitStatus::writable_mask(caps) & !RtitStatus::READ_ONLY;
                self.status = RtitStatus((self.status.0 & !w) | (value & w));
            }
            IA32_RTIT_CR3_MATCH => self.cr3_match = value,
            IA32_RTIT_OUTPUT_BASE => self.output_base = value,
            IA32_RTIT_OUTPUT_MASK_PTRS => self.output_mask_ptrs = OutputMaskPtrs::new(value),
            _ => match addr_index(index) {
                Some((n, false)) => self.addr[n].a = value,
                Some((n, true)) => self.addr[n].b = value,
                // check_write only accepts the indices above.
                None => return Err(Fault::Gp),
            },
        }
        Ok(WriteEffect::Plain)
    }

    /// A ToPA region with INT=1 filled: set IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI
    /// (§33.2.7.2 "ToPA PMI"). Delivering the PMI itself is the caller's job.
    pub fn set_topa_pmi(&mut self) {
        self.perf_global_status_topa_pmi = true;
    }

    /// A ToPA region with INT = 1 filled (§33.2.7.2 "ToPA PMI", "PMI Preservation"):
    /// Trace_ToPA_PMI, and with IA32_RTIT_CTL[56] InjectPsbPmiOnEnable also
    /// IA32_RTIT_STATUS[7] PendTopaPMI, which stays set until software clears it ("the PMI
    /// handler ... should clear PendTopaPMI" once it handled the PMI with TraceEn = 1). The
    /// caller delivers the PMI.
    pub fn topa_pmi_triggered(&mut self) {
        self.set_topa_pmi();
        if self.ctl.inject_psb_pmi_on_enable() {
            self.status.set_pend_topa_pmi(true);
        }
    }

    /// What an accepted TraceEn 0 -> 1 injects (PSB and PMI preservation, CPUID.(14H,0):EBX[6];
    /// IA32_RTIT_STATUS[6] PendPSB, [7] PendTopaPMI): with InjectPsbPmiOnEnable = 1, PendPSB = 1
    /// inserts a PSB+ at the enable whatever PacketByteCnt holds, and PendTopaPMI = 1 pends a
    /// ToPA PMI ("If this bit is set when Intel PT is enabled, such that TraceEn transitions from
    /// 0 to 1, a ToPA PMI is pended", seed 000 "PMI Preservation"). With InjectPsbPmiOnEnable = 0
    /// both bits are ignored. PendPSB is cleared here (the processor clears it once the PSB+ is
    /// inserted); PendTopaPMI is software's to clear. Returns (psb, pmi).
    pub fn enable_injections(&mut self) -> (bool, bool) {
        if !self.ctl.inject_psb_pmi_on_enable() {
            return (false, false);
        }
        let psb = self.status.pend_psb();
        self.status.set_pend_psb(false);
        (psb, self.status.pend_topa_pmi())
    }

    /// TraceEn 1 -> 0 while a PSB+ was due (PacketByteCnt reached the PSBFreq period and the
    /// PSB+ had not been inserted yet): with InjectPsbPmiOnEnable, STATUS.PendPSB = 1 keeps it
    /// for the next enable (a context saved by XSAVES and restored later).
    pub fn trace_disabled(&mut self, psb_due: bool) {
        if psb_due && self.ctl.inject_psb_pmi_on_enable() {
            self.status.set_pend_psb(true);
        }
    }

    /// IA32_PERF_GLOBAL_STATUS[55] Trace_ToPA_PMI.
    pub fn topa_pmi(&self) -> bool {
        self.perf_global_status_topa_pmi
    }

    /// The ADDRn_CFG-selected ranges as the filter sees them.
    pub fn addr_ranges(&self) -> &[AddrRange; MAX_ADDR_RANGES] {
        &self.addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SKL: PtCaps = PtCaps::SKYLAKE;

    #[test]
    fn power_on_values_are_zero_and_mask_ptrs_reads_7f() {
        let m = RtitMsrs::default();
        assert_eq!(m, RtitMsrs::reset_value());
        assert_eq!(m.read(IA32_RTIT_CTL, &SKL), Ok(0));
        assert_eq!(m.read(IA32_RTIT_STATUS, &SKL), Ok(0));
        assert_eq!(m.read(IA32_RTIT_OUTPUT_BASE, &SKL), Ok(0));
        assert_eq!(m.read(IA32_RTIT_OUTPUT_MASK_PTRS, &SKL), Ok(0x7F));
        assert_eq!(m.read(IA32_RTIT_CR3_MATCH, &SKL), Ok(0));
        assert_eq!(m.read(IA32_RTIT_ADDR1_B, &SKL), Ok(0));
        assert_eq!(m.read(IA32_PERF_GLOBAL_STATUS, &SKL), Ok(0));
    }

    #[test]
    fn skylake_ctl_reserved_mask_leaves_exactly_the_enumerated_bits() {
        // TraceEn, CYCEn, OS, User, CR3Filter, ToPA, MTCEn, TSCEn, DisRETC, BranchEn, MTCFreq,
        // CycThresh, PSBFreq, ADDR0_CFG, ADDR1_CFG.
        let allowed = 0b1
            | 0b10
            | 0b100
            | 0b1000
            | (1 << 7)
            | (1 << 8)
            | (1 << 9)
            | (1 << 10)
            | (1 << 11)
            | (1 << 13)
            | (0xF << 14)
            | (0xF << 19)
            | (0xF << 24)
            | (0xFF << 32);
        assert_eq!(ctl_reserved_mask(&SKL), !allowed);
    }

    #[test]
    fn status_field_accessors_name_the_sdm_bits() {
        let mut s = RtitStatus::default();
        s.set_stopped(true)
            .set_error(true)
            .set_packet_byte_cnt(0x1_2345);
        assert_eq!(s.0, (1 << 5) | (1 << 4) | (0x1_2345 << 32));
        assert!(s.stopped() && s.error() && !s.trigger_en());
        assert_eq!(s.packet_byte_cnt(), 0x1_2345);
        s.set_packet_byte_cnt(0xFFFF_FFFF);
        assert_eq!(s.packet_byte_cnt(), 0x1_FFFF);
    }

    #[test]
    fn mask_ptrs_fields_split_at_bits_7_and_32() {
        let mut p = OutputMaskPtrs::new(0);
        assert_eq!(p.value(), 0x7F);
        p.set_mask_or_table_offset(3).set_output_offset(0x100);
        assert_eq!(p.value(), 0x7F | (3 << 7) | (0x100 << 32));
        assert_eq!(p.lower_mask(), 0x7F);
        assert_eq!(p.mask_or_table_offset(), 3);
        assert_eq!(p.output_offset(), 0x100);
        assert_eq!(p.single_range_mask(), 0x7F | (3 << 7));
    }

    #[test]
    fn sapphire_rapids_ctl_allows_its_enumerated_enables_and_not_ptwrite() {
        let spr = PtCaps::SAPPHIRE_RAPIDS;
        let reserved = ctl_reserved_mask(&spr);
        // PwrEvtEn 4, EventEn 31, DisTNT 55, InjectPsbPmiOnEnable 56: writable.
        for bit in [4, 31, 55, 56] {
            assert_eq!(reserved & (1 << bit), 0, "bit {bit}");
        }
        // FUPonPTW 5 and PTWEn 12 (PTWRITE not enumerated), and the always-reserved bits: #GP.
        for bit in [5, 12, 18, 23, 28, 29, 30, 48, 54, 57, 63] {
            assert_ne!(reserved & (1 << bit), 0, "bit {bit}");
        }
        // Everything else is the Skylake-class mask.
        let new_bits = (1 << 4) | (1 << 31) | (1 << 55) | (1 << 56);
        assert_eq!(reserved | new_bits, ctl_reserved_mask(&SKL));
        let m = RtitMsrs::default();
        assert_eq!(m.check_write(IA32_RTIT_CTL, 1 << 12, &spr), Err(Fault::Gp));
        assert_eq!(m.check_write(IA32_RTIT_CTL, new_bits | 0x2001 | (1 << 8), &spr), Ok(()));
    }

    fn preserving() -> PtCaps {
        PtCaps { psb_pmi_preserve: true, ..SKL }
    }

    #[test]
    fn topa_pmi_sets_pend_topa_pmi_only_with_inject_psb_pmi_on_enable() {
        let caps = preserving();
        let mut m = RtitMsrs::default();
        m.topa_pmi_triggered();
        assert!(m.topa_pmi() && !m.status.pend_topa_pmi());
        m.write(IA32_RTIT_CTL, 1 << 56, &caps).unwrap();
        m.topa_pmi_triggered();
        assert!(m.status.pend_topa_pmi());
        assert_eq!(m.read(IA32_RTIT_STATUS, &caps), Ok(RtitStatus::PEND_TOPA_PMI));
    }

    #[test]
    fn enable_injects_pending_psb_and_pmi_only_with_inject_psb_pmi_on_enable() {
        let caps = preserving();
        let mut m = RtitMsrs::default();
        m.write(IA32_RTIT_STATUS, RtitStatus::PEND_PSB | RtitStatus::PEND_TOPA_PMI, &caps).unwrap();
        m.write(IA32_RTIT_CTL, 0x2001 | (1 << 8), &caps).unwrap();
        assert_eq!(m.enable_injections(), (false, false), "InjectPsbPmiOnEnable = 0: ignored");
        assert!(m.status.pend_psb() && m.status.pend_topa_pmi());
        m.write(IA32_RTIT_CTL, 0x2000 | (1 << 8), &caps).unwrap();
        m.write(IA32_RTIT_CTL, 0x2001 | (1 << 8) | (1 << 56), &caps).unwrap();
        assert_eq!(m.enable_injections(), (true, true));
        // PendPSB is cleared by the inserted PSB+; PendTopaPMI stays for software.
        assert!(!m.status.pend_psb() && m.status.pend_topa_pmi());
        assert_eq!(m.enable_injections(), (false, true));
    }

    #[test]
    fn disable_with_a_psb_due_sets_pend_psb_only_with_inject_psb_pmi_on_enable() {
        let caps = preserving();
        let mut m = RtitMsrs::default();
        m.trace_disabled(true);
        assert!(!m.status.pend_psb());
        m.write(IA32_RTIT_CTL, 1 << 56, &caps).unwrap();
        m.trace_disabled(false);
        assert!(!m.status.pend_psb());
        m.trace_disabled(true);
        assert!(m.status.pend_psb());
    }

    #[test]
    fn canonical_48_accepts_sign_extended_addresses_only() {
        assert!(is_canonical_48(0x0000_7FFF_FFFF_FFFF));
        assert!(is_canonical_48(0xFFFF_8000_0000_0000));
        assert!(!is_canonical_48(0x0000_8000_0000_0000));
        assert!(!is_canonical_48(0xFFFF_7FFF_FFFF_FFFF));
    }
}
