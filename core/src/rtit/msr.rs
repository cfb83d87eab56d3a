//! The RTIT MSR file of one logical processor (RTIT Programming Reference v1.05 §3.3, seed 002).
//!
//! Every MSR is a typed register with named fields and a reserved mask; [`RtitMsrs::check_write`]
//! is a pure #GP check and [`RtitMsrs::write`] applies a checked write and reports what the write
//! did to TriggerEn ([`WriteEffect`]). The tracer owns one `RtitMsrs` and keeps the MSRs that
//! reflect internal state (RTIT_TNT_BUFF, RTIT_LAST_LIP, RTIT_LAST_CALL_NLIP, RTIT_PKT_CNT,
//! RTIT_OFFSET, RTIT_CNTP, RTIT_STATUS[FilterEn], RTIT_STATUS[Buffer_Overflow]) *in* these
//! registers, so RDMSR reads back exactly what the model holds.
//!
//! Seed choices (each also stated at the rule):
//! - The seed tabulates 32-bit fields only; bits 63:32 of RTIT_CTL, RTIT_STATUS, RTIT_CNTP,
//!   RTIT_EVENTS, RTIT_LIMIT_MASK, RTIT_OFFSET and RTIT_PKT_CNT are treated as reserved (#GP).
//! - §3.3.6 says both "Reads return the sign-extended value of bit 47" and "reads of this MSR will
//!   return 0 for the LIP_SIGN_EXT field"; we sign-extend (what the table row and the issue say).
//! - Table 7's reserved event IDs (011b, 100b, 101b) are not reserved *bits*; §3.3.1 only makes
//!   reserved bits #GP, so they are accepted and never match (see [`EventId::Reserved`]).
//! - RTIT_LIMIT_MASK[5:0] are "Reserved as 3F": writing anything but 3FH there changes reserved
//!   bits and #GPs (§3.3.1).

pub use crate::pt::msr::Fault;

/// RTIT_LIP0 (760H): RANGE0 base (§3.3.6).
pub const RTIT_LIP0: u32 = 0x760;
/// RTIT_LIP1 (761H): RANGE1 base.
pub const RTIT_LIP1: u32 = 0x761;
/// RTIT_LIP2 (762H): RANGE0 limit (exclusive: RANGE0 is [LIP0..LIP2-1]).
pub const RTIT_LIP2: u32 = 0x762;
/// RTIT_LIP3 (763H): RANGE1 limit (exclusive: RANGE1 is [LIP1..LIP3-1]).
pub const RTIT_LIP3: u32 = 0x763;
/// RTIT_CTL (768H) (§3.3.2).
pub const RTIT_CTL: u32 = 0x768;
/// RTIT_STATUS (769H) (§3.3.3).
pub const RTIT_STATUS: u32 = 0x769;
/// RTIT_CNTP (76BH) (§3.3.4).
pub const RTIT_CNTP: u32 = 0x76B;
/// RTIT_EVENTS (76CH) (§3.3.5).
pub const RTIT_EVENTS: u32 = 0x76C;
/// RTIT_LAST_LIP (76EH) (§3.3.7).
pub const RTIT_LAST_LIP: u32 = 0x76E;
/// RTIT_LAST_CALL_NLIP (76FH) (§3.3.14).
pub const RTIT_LAST_CALL_NLIP: u32 = 0x76F;
/// RTIT_BASE_ADDR (770H) (§3.3.10).
pub const RTIT_BASE_ADDR: u32 = 0x770;
/// RTIT_LIMIT_MASK (771H) (§3.3.11).
pub const RTIT_LIMIT_MASK: u32 = 0x771;
/// RTIT_OFFSET (772H) (§3.3.12).
pub const RTIT_OFFSET: u32 = 0x772;
/// RTIT_CR3_MATCH (777H) (§3.3.8).
pub const RTIT_CR3_MATCH: u32 = 0x777;
/// RTIT_PKT_CNT (77CH) (§3.3.9).
pub const RTIT_PKT_CNT: u32 = 0x77C;
/// RTIT_TNT_BUFF (77DH) (§3.3.13).
pub const RTIT_TNT_BUFF: u32 = 0x77D;

/// Every RTIT MSR index, in address order.
pub const ALL_MSRS: [u32; 16] = [
    RTIT_LIP0,
    RTIT_LIP1,
    RTIT_LIP2,
    RTIT_LIP3,
    RTIT_CTL,
    RTIT_STATUS,
    RTIT_CNTP,
    RTIT_EVENTS,
    RTIT_LAST_LIP,
    RTIT_LAST_CALL_NLIP,
    RTIT_BASE_ADDR,
    RTIT_LIMIT_MASK,
    RTIT_OFFSET,
    RTIT_CR3_MATCH,
    RTIT_PKT_CNT,
    RTIT_TNT_BUFF,
];

/// Is `index` one of the RTIT MSRs?
pub fn is_rtit_msr(index: u32) -> bool {
    ALL_MSRS.contains(&index)
}

// ---------------------------------------------------------------------------------------------
// RTIT_CTL
// ---------------------------------------------------------------------------------------------

/// RTIT_CTL (768H) as a typed register (Table 4). Reset value 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitCtl(pub u64);

impl RtitCtl {
    /// RTIT_CTL[6:5] and RTIT_CTL[63:16]: reserved, a WRMSR setting them #GPs.
    pub const RESERVED: u64 = !0xFF9F;

    crate::reg_flag!(trace_en, set_trace_en, 0, "RTIT_CTL[0] Trace_En: global enable");
    crate::reg_flag!(cycle_acc, set_cycle_acc, 1, "RTIT_CTL[1] Cycle_Acc: cycle accurate mode");
    crate::reg_flag!(os, set_os, 2, "RTIT_CTL[2] OS: trace CPL0");
    crate::reg_flag!(user, set_user, 3, "RTIT_CTL[3] User: trace CPL1/2/3");
    crate::reg_flag!(sts_on_cr3, set_sts_on_cr3, 4, "RTIT_CTL[4] STS_on_CR3: STS on MOV CR3");
    crate::reg_flag!(cr3_en, set_cr3_en, 7, "RTIT_CTL[7] CR3En: CR3 filtering");
    crate::reg_flag!(dest, set_dest, 8, "RTIT_CTL[8] Dest: 0 forces the TraceStop write address to xxC0H");
    crate::reg_flag!(mtc_en, set_mtc_en, 9, "RTIT_CTL[9] MTC_En");
    crate::reg_flag!(sts_en, set_sts_en, 10, "RTIT_CTL[10] STS_En");
    crate::reg_flag!(cmprs_ret, set_cmprs_ret, 11, "RTIT_CTL[11] Cmprs_Ret: RET compression");
    crate::reg_flag!(less_pkts, set_less_pkts, 12, "RTIT_CTL[12] Less_Pkts (Table 17)");
    crate::reg_flag!(trace_active, set_trace_active, 13, "RTIT_CTL[13] TraceActive: cleared by TraceStop");
    crate::reg_field!(mtc_range, set_mtc_range, 14, 2, "RTIT_CTL[15:14] MTC_Range");

    /// TriggerEn = RTIT_CTL[Trace_En] AND RTIT_CTL[TraceActive] (§2.1.1).
    pub fn trigger_en(self) -> bool {
        self.trace_en() && self.trace_active()
    }

    /// Lowest HW TSC bit of the 8 bits an MTC carries: TSC[14:7], [16:9], [18:11], [20:13]
    /// for MTC_Range 0..3 (§4.2.12).
    pub fn mtc_shift(self) -> u32 {
        7 + 2 * u32::from(self.mtc_range())
    }
}

// ---------------------------------------------------------------------------------------------
// RTIT_STATUS
// ---------------------------------------------------------------------------------------------

/// RTIT_STATUS (769H) as a typed register (§3.3.3). Reset value 0.
///
/// The stored value holds FilterEn and Buffer_Overflow; ContextEn and TriggerEn are computed by
/// the tracer when the MSR is read (they are read-only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitStatus(pub u64);

impl RtitStatus {
    /// RTIT_STATUS[1] ContextEn and RTIT_STATUS[2] TriggerEn: read-only, WRMSR ignores them
    /// ("will have no effect on the value; but will not cause a #GP").
    pub const READ_ONLY: u64 = 0b110;
    /// RTIT_STATUS[63:4]: reserved ([31:4] per the seed, [63:32] by our 32-bit reading).
    pub const RESERVED: u64 = !0xF;

    crate::reg_flag!(filter_en, set_filter_en, 0, "RTIT_STATUS[0] FilterEn (read/write)");
    crate::reg_flag!(context_en, set_context_en, 1, "RTIT_STATUS[1] ContextEn (read-only)");
    crate::reg_flag!(trigger_en, set_trigger_en, 2, "RTIT_STATUS[2] TriggerEn (read-only)");
    crate::reg_flag!(buffer_overflow, set_buffer_overflow, 3, "RTIT_STATUS[3] Buffer_Overflow (read/write)");
}

// ---------------------------------------------------------------------------------------------
// RTIT_EVENTS
// ---------------------------------------------------------------------------------------------

/// An event ID (Table 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventId {
    /// 000b RANGE0 = [RTIT_LIP0..RTIT_LIP2-1].
    Range0,
    /// 001b RANGE1 = [RTIT_LIP1..RTIT_LIP3-1].
    Range1,
    /// 010b RANGE0 || RANGE1.
    Range0Or1,
    /// 011b, 100b, 101b: reserved encodings. Our choice: accepted by WRMSR (they are not reserved
    /// bits, §3.3.1) and never signal anything (FilterEn keeps its value, no TraceStop).
    Reserved(u8),
    /// 110b Always off.
    AlwaysOff,
    /// 111b Always on.
    AlwaysOn,
}

impl EventId {
    pub fn from_bits(v: u8) -> Self {
        match v & 7 {
            0 => EventId::Range0,
            1 => EventId::Range1,
            2 => EventId::Range0Or1,
            6 => EventId::AlwaysOff,
            7 => EventId::AlwaysOn,
            r => EventId::Reserved(r),
        }
    }

    pub fn bits(self) -> u8 {
        match self {
            EventId::Range0 => 0,
            EventId::Range1 => 1,
            EventId::Range0Or1 => 2,
            EventId::Reserved(r) => r & 7,
            EventId::AlwaysOff => 6,
            EventId::AlwaysOn => 7,
        }
    }
}

/// RTIT_EVENTS (76CH) as a typed register (Table 6). Reset value 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitEvents(pub u64);

impl RtitEvents {
    /// RTIT_EVENTS[63:6]: reserved.
    pub const RESERVED: u64 = !0x3F;

    crate::reg_field!(filter_event_id_bits, set_filter_event_id_bits, 0, 3, "RTIT_EVENTS[2:0] Filter_Event_ID");
    crate::reg_field!(stop_event_id_bits, set_stop_event_id_bits, 3, 3, "RTIT_EVENTS[5:3] TraceStop_Event_ID");

    /// RTIT_EVENTS[2:0] Filter_Event_ID: controls RTIT_STATUS.FilterEn.
    pub fn filter_event(self) -> EventId {
        EventId::from_bits(self.filter_event_id_bits())
    }

    /// RTIT_EVENTS[5:3] TraceStop_Event_ID: causes the TraceStop action.
    pub fn stop_event(self) -> EventId {
        EventId::from_bits(self.stop_event_id_bits())
    }

    /// A value with both fields set.
    pub fn new(filter: EventId, stop: EventId) -> Self {
        let mut e = RtitEvents(0);
        e.set_filter_event_id_bits(filter.bits()).set_stop_event_id_bits(stop.bits());
        e
    }
}

// ---------------------------------------------------------------------------------------------
// RTIT_PKT_CNT
// ---------------------------------------------------------------------------------------------

/// RTIT_PKT_CNT (77CH) as a typed register (Table 11). Reset value 0002_0000H (Pkt_Mask = 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitPktCnt(pub u64);

impl Default for RtitPktCnt {
    fn default() -> Self {
        RtitPktCnt(Self::RESET)
    }
}

impl RtitPktCnt {
    pub const RESET: u64 = 0x0002_0000;
    /// RTIT_PKT_CNT[15:14] and [63:18]: reserved.
    pub const RESERVED: u64 = !0x3_3FFF;
    /// RTIT_PKT_CNT[13:0] Pkt_Cnt.
    pub const PKT_CNT: u64 = 0x3FFF;

    crate::reg_field!(pkt_mask, set_pkt_mask, 16, 2, "RTIT_PKT_CNT[17:16] Pkt_Mask");

    /// RTIT_PKT_CNT[13:0] Pkt_Cnt: packet bytes since enable or the last PSB.
    pub fn pkt_cnt(self) -> u16 {
        (self.0 & Self::PKT_CNT) as u16
    }

    pub fn set_pkt_cnt(&mut self, v: u16) -> &mut Self {
        self.0 = (self.0 & !Self::PKT_CNT) | (u64::from(v) & Self::PKT_CNT);
        self
    }

    /// The Pkt_Cnt bit whose setting sends a PSB: bit 11 + Pkt_Mask. For Pkt_Mask = 3 that is
    /// bit 14, "overflow of this field" (Table 11).
    pub fn monitored_bit(self) -> u32 {
        11 + u32::from(self.pkt_mask())
    }
}

// ---------------------------------------------------------------------------------------------
// RTIT_TNT_BUFF
// ---------------------------------------------------------------------------------------------

/// RTIT_TNT_BUFF (77DH) (Table 15): the pending TNT packet byte. The leading 1 is the valid
/// marker; bits to its right are branch results, oldest leftmost. Reset value 1 (empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitTntBuff(pub u64);

impl Default for RtitTntBuff {
    fn default() -> Self {
        RtitTntBuff(1)
    }
}

impl RtitTntBuff {
    /// RTIT_TNT_BUFF[63:7]: reserved.
    pub const RESERVED: u64 = !0x7F;

    /// Number of branch results held (0..=6): the position of the leading 1. A value of 0 (which
    /// WRMSR refuses) also holds none.
    pub fn count(self) -> u8 {
        let v = (self.0 & 0x7F) as u8;
        if v == 0 {
            0
        } else {
            7 - v.leading_zeros() as u8
        }
    }

    /// The branch results without the valid marker.
    pub fn bits(self) -> u8 {
        let n = self.count();
        (self.0 as u8) & ((1u8 << n) - 1)
    }

    /// Six results: "a full TNT packet exists".
    pub fn is_full(self) -> bool {
        self.count() == 6
    }
}

// ---------------------------------------------------------------------------------------------
// RTIT_LAST_CALL_NLIP
// ---------------------------------------------------------------------------------------------

/// RTIT_LAST_CALL_NLIP (76FH) (Table 16). Reset value 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RtitLastCallNlip(pub u64);

impl RtitLastCallNlip {
    /// RTIT_LAST_CALL_NLIP[63:49]: reserved.
    pub const RESERVED: u64 = !0x1_FFFF_FFFF_FFFF;
    /// RTIT_LAST_CALL_NLIP[47:0] Call_NLIP.
    pub const NLIP: u64 = 0xFFFF_FFFF_FFFF;

    crate::reg_flag!(valid, set_valid, 48, "RTIT_LAST_CALL_NLIP[48] NLIP_Valid");

    /// RTIT_LAST_CALL_NLIP[47:0] Call_NLIP (NLIP[47:0] of the last traced near CALL).
    pub fn nlip(self) -> u64 {
        self.0 & Self::NLIP
    }

    /// A valid entry holding `nlip`[47:0].
    pub fn holding(nlip: u64) -> Self {
        RtitLastCallNlip((nlip & Self::NLIP) | (1 << 48))
    }
}

// ---------------------------------------------------------------------------------------------
// Output and comparator registers
// ---------------------------------------------------------------------------------------------

/// RTIT_BASE_ADDR[5:0] and [63:36]: reserved as 0 (Table 12).
pub const BASE_ADDR_RESERVED: u64 = !0xF_FFFF_FFC0;
/// RTIT_BASE_ADDR reset value.
pub const BASE_ADDR_RESET: u64 = 0xFDC0_0000;
/// RTIT_LIMIT_MASK[5:0] Rsvd_as_1 (Table 13).
pub const LIMIT_MASK_ONES: u64 = 0x3F;
/// RTIT_LIMIT_MASK[21:6] Mask_Value.
pub const LIMIT_MASK_VALUE: u64 = 0x3F_FFC0;
/// RTIT_LIMIT_MASK reset value.
pub const LIMIT_MASK_RESET: u64 = 0x7F;
/// RTIT_OFFSET[21:0] Offset (Table 14); [63:22] reserved.
pub const OFFSET_MASK: u64 = 0x3F_FFFF;
/// RTIT_CNTP[21:0] CNTP (Table 5); [63:22] reserved.
pub const CNTP_MASK: u64 = 0x3F_FFFF;
/// RTIT_CR3_MATCH[35:5] (Table 10); [4:0] and [63:36] reserved.
pub const CR3_MATCH_MASK: u64 = 0xF_FFFF_FFE0;
/// RTIT_LAST_LIP[32:0] (Table 9); [63:33] reserved.
pub const LAST_LIP_MASK: u64 = 0x1_FFFF_FFFF;
/// RTIT_LIPn[47:0] LIPN_ADDR (Table 8).
pub const LIP_ADDR_MASK: u64 = 0xFFFF_FFFF_FFFF;

/// Sign-extend bit 47 into bits 63:48 (RTIT_LIPn[63:48] LIP_SIGN_EXT on read).
pub fn sign_extend_47(v: u64) -> u64 {
    (((v << 16) as i64) >> 16) as u64
}

// ---------------------------------------------------------------------------------------------
// The MSR file
// ---------------------------------------------------------------------------------------------

/// What an accepted WRMSR did to TriggerEn (RTIT_CTL[Trace_En] AND RTIT_CTL[TraceActive]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteEffect {
    /// TriggerEn went 0 -> 1: a PSB is due (§3.3.2, §4.2.1).
    TriggerEnabled,
    /// TriggerEn went 1 -> 0 by the write.
    TriggerDisabled,
    /// Anything else.
    Plain,
}

/// The RTIT MSRs of one logical processor, as stored values.
///
/// RTIT_STATUS[ContextEn] and RTIT_STATUS[TriggerEn] are not stored: the tracer computes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtitMsrs {
    /// RTIT_LIP0..RTIT_LIP3 (760H..763H), bits 47:0.
    pub lip: [u64; 4],
    pub ctl: RtitCtl,
    pub status: RtitStatus,
    /// RTIT_CNTP[21:0].
    pub cntp: u64,
    pub events: RtitEvents,
    /// RTIT_LAST_LIP as its raw value (see `lip::LastLip` for the fields).
    pub last_lip: u64,
    pub last_call_nlip: RtitLastCallNlip,
    pub base_addr: u64,
    pub limit_mask: u64,
    pub offset: u64,
    pub cr3_match: u64,
    pub pkt_cnt: RtitPktCnt,
    pub tnt_buff: RtitTntBuff,
}

impl Default for RtitMsrs {
    fn default() -> Self {
        Self::reset_value()
    }
}

impl RtitMsrs {
    /// Reset values (§3.3.2 .. §3.3.14). "RTIT MSRs are not cleared by INIT" (§3.3.1).
    pub fn reset_value() -> Self {
        RtitMsrs {
            lip: [0; 4],
            ctl: RtitCtl(0),
            status: RtitStatus(0),
            cntp: 0,
            events: RtitEvents(0),
            last_lip: 0,
            last_call_nlip: RtitLastCallNlip(0),
            base_addr: BASE_ADDR_RESET,
            limit_mask: LIMIT_MASK_RESET,
            offset: 0,
            cr3_match: 0,
            pkt_cnt: RtitPktCnt::default(),
            tnt_buff: RtitTntBuff::default(),
        }
    }

    /// The stored value of `index` (RTIT_STATUS without ContextEn/TriggerEn, RTIT_LIPn already
    /// sign-extended); None for an index that is not an RTIT MSR.
    pub fn stored(&self, index: u32) -> Option<u64> {
        Some(match index {
            RTIT_LIP0..=RTIT_LIP3 => sign_extend_47(self.lip[(index - RTIT_LIP0) as usize]),
            RTIT_CTL => self.ctl.0,
            RTIT_STATUS => self.status.0,
            RTIT_CNTP => self.cntp,
            RTIT_EVENTS => self.events.0,
            RTIT_LAST_LIP => self.last_lip,
            RTIT_LAST_CALL_NLIP => self.last_call_nlip.0,
            RTIT_BASE_ADDR => self.base_addr,
            RTIT_LIMIT_MASK => self.limit_mask,
            RTIT_OFFSET => self.offset,
            RTIT_CR3_MATCH => self.cr3_match,
            RTIT_PKT_CNT => self.pkt_cnt.0,
            RTIT_TNT_BUFF => self.tnt_buff.0,
            _ => return None,
        })
    }

    /// Would WRMSR `index` <- `value` #GP? Pure. `ctl_read` says whether RTIT_CTL has been read
    /// on this logical processor: "Until the RTIT_CTL MSR (0x768) has been read any attempt to
    /// write any RTIT MSR ... will result in a #GP fault" (§3.3.1), RTIT_CTL included.
    pub fn check_write(&self, index: u32, value: u64, ctl_read: bool) -> Result<(), Fault> {
        if !is_rtit_msr(index) || !ctl_read {
            return Err(Fault::Gp);
        }
        let reserved = match index {
            // RTIT_LIPn[63:48] "Writes to it have no effect": no reserved bits.
            RTIT_LIP0..=RTIT_LIP3 => 0,
            RTIT_CTL => RtitCtl::RESERVED,
            // Read-only ContextEn/TriggerEn "are not checked as reserved bits".
            RTIT_STATUS => RtitStatus::RESERVED,
            RTIT_CNTP => !CNTP_MASK,
            RTIT_EVENTS => RtitEvents::RESERVED,
            RTIT_LAST_LIP => !LAST_LIP_MASK,
            RTIT_LAST_CALL_NLIP => RtitLastCallNlip::RESERVED,
            RTIT_BASE_ADDR => BASE_ADDR_RESERVED,
            RTIT_LIMIT_MASK => {
                // [5:0] Reserved as 3F: clearing any of them changes a reserved bit.
                if value & LIMIT_MASK_ONES != LIMIT_MASK_ONES {
                    return Err(Fault::Gp);
                }
                !(LIMIT_MASK_VALUE | LIMIT_MASK_ONES)
            }
            RTIT_OFFSET => !OFFSET_MASK,
            RTIT_CR3_MATCH => !CR3_MATCH_MASK,
            RTIT_PKT_CNT => RtitPktCnt::RESERVED,
            RTIT_TNT_BUFF => {
                // §3.3.13: "A MSR write that attempts to write a value of all zeroes will cause a
                // #GP."
                if value == 0 {
                    return Err(Fault::Gp);
                }
                RtitTntBuff::RESERVED
            }
            _ => return Err(Fault::Gp),
        };
        if value & reserved != 0 {
            return Err(Fault::Gp);
        }
        Ok(())
    }

    /// WRMSR `index` <- `value`: [`RtitMsrs::check_write`], then store. On `Err` nothing changed.
    /// Side effects beyond the stored value (PSB, FUP.PGE/PGD, drain) are the tracer's.
    pub fn write(&mut self, index: u32, value: u64, ctl_read: bool) -> Result<WriteEffect, Fault> {
        self.check_write(index, value, ctl_read)?;
        match index {
            RTIT_LIP0..=RTIT_LIP3 => self.lip[(index - RTIT_LIP0) as usize] = value & LIP_ADDR_MASK,
            RTIT_CTL => {
                let was = self.ctl.trigger_en();
                self.ctl = RtitCtl(value);
                return Ok(match (was, self.ctl.trigger_en()) {
                    (false, true) => WriteEffect::TriggerEnabled,
                    (true, false) => WriteEffect::TriggerDisabled,
                    _ => WriteEffect::Plain,
                });
            }
            RTIT_STATUS => {
                let keep = self.status.0 & RtitStatus::READ_ONLY;
                self.status = RtitStatus((value & !RtitStatus::READ_ONLY) | keep);
            }
            RTIT_CNTP => self.cntp = value,
            RTIT_EVENTS => self.events = RtitEvents(value),
            RTIT_LAST_LIP => self.last_lip = value,
            RTIT_LAST_CALL_NLIP => self.last_call_nlip = RtitLastCallNlip(value),
            RTIT_BASE_ADDR => self.base_addr = value,
            RTIT_LIMIT_MASK => self.limit_mask = value,
            RTIT_OFFSET => self.offset = value,
            RTIT_CR3_MATCH => self.cr3_match = value,
            RTIT_PKT_CNT => self.pkt_cnt = RtitPktCnt(value),
            RTIT_TNT_BUFF => self.tnt_buff = RtitTntBuff(value),
            _ => return Err(Fault::Gp),
        }
        Ok(WriteEffect::Plain)
    }

    /// RANGE0 (n = 0) or RANGE1 (n = 1) as [base, limit): [RTIT_LIPn..RTIT_LIP(n+2)-1] (§3.3.5).
    pub fn range(&self, n: usize) -> (u64, u64) {
        (self.lip[n], self.lip[n + 2])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctl_fields_sit_at_table_4_positions() {
        let mut c = RtitCtl(0);
        c.set_trace_en(true).set_trace_active(true).set_mtc_range(3).set_less_pkts(true);
        assert_eq!(c.0, 1 | (1 << 13) | (3 << 14) | (1 << 12));
        assert!(c.trigger_en());
        assert_eq!(c.mtc_shift(), 13);
        assert_eq!(RtitCtl::RESERVED & 0xFFFF, 0x60);
    }

    #[test]
    fn tnt_buff_count_and_bits_follow_the_leading_one() {
        assert_eq!(RtitTntBuff(1).count(), 0);
        assert_eq!(RtitTntBuff(0b101).count(), 2);
        assert_eq!(RtitTntBuff(0b101).bits(), 0b01);
        assert!(RtitTntBuff(0x40 | 0x15).is_full());
        assert_eq!(RtitTntBuff(0x7F).bits(), 0x3F);
    }

    #[test]
    fn event_ids_round_trip() {
        for v in 0..8 {
            assert_eq!(EventId::from_bits(v).bits(), v);
        }
        let e = RtitEvents::new(EventId::AlwaysOn, EventId::Range1);
        assert_eq!(e.0, 0b001_111);
        assert_eq!((e.filter_event(), e.stop_event()), (EventId::AlwaysOn, EventId::Range1));
    }
}
