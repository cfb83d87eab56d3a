//! The Intel PT packet generator of one logical processor: enable logic, COFI packets,
//! RET compression, TNT, IP compression and PSB insertion, driven by retirement events.
//!
//! SDM Vol. 3C references: §33.2.1 (COFI tracing, Table 33-1), §33.2.6 (PacketEn = TriggerEn &
//! ContextEn & FilterEn & BranchEn), §33.4.2 (packets), Table 33-23 (FUP IPs for asynchronous
//! events), Table 33-50 (packets per event under the enable conditions).
//!
//! The model is event driven: the caller reports what retired (a branch with its outcome, a far
//! transfer with the new context, an asynchronous event) and the tracer appends exactly the
//! packets hardware would produce to its output buffer. It has no knowledge of QEMU.
//!
//! # Internal buffer and overflow (opt-in: [`Tracer::with_internal_buffer`])
//!
//! Without an internal buffer every packet goes straight to the output (the behaviour, and the
//! bytes, of the model before overflow existed). With one, packets enter an
//! [`InternalBuffer`] of bounded size that drains at a modelled bandwidth, and the tracer
//! overflows the way hardware does. Sources: SDM §33.4.2.16 "Overflow (OVF) Packet"
//! (shared/reference/pt-packets.md §5), libipt's scenarios test/src/ovf-fup.ptt,
//! ovf-tip_pge.ptt, ovf.ptt, psb-ovf-fup.ptt, psb-ovf-tip_pge.ptt, ovf-timing-fup.ptt and
//! ovf-timing-tip_pge.ptt, and libipt's decoder (src/pt_event_decoder.c, pt_evt_decode_ovf and
//! pt_evt_find_ovf_fup):
//!
//! - Granularity: whole packets. A packet that does not fit is dropped whole and starts the
//!   overflow; from then on every packet is dropped, even ones that would fit, until it
//!   resolves, so the stream has one gap per episode. PSB+ is *not* a unit: psb-ovf-fup.ptt and
//!   psb-ovf-tip_pge.ptt show a PSB+ cut short by the overflow (PSB, MODE.Exec, FUP, then OVF
//!   with no PSBEND; libipt: "An OVF ends a PSB just like PSBEND"). A PSB whose own packet was
//!   dropped stays due (PacketByteCnt is not reset) and follows once the overflow resolved.
//! - Enables, filters, the RET stack, TNT accumulation and PacketEn keep being evaluated during
//!   the overflow ("changes to the enables continue to be evaluated"); only packets are lost.
//! - Resolution is checked at the start of each retirement event, at the instruction boundary
//!   the previous event left (`resume_ip`, the next instruction to execute), once the buffer
//!   has `resume_free` bytes free. The tracer then discards the TNT bits of branches that
//!   retired during the overflow, resets last-IP and the RET-compression stack, and writes OVF;
//!   with TSCEn, TSC (and TMA with MTCEn) to resynchronise time (timing packets between OVF and
//!   FUP/TIP.PGE: ovf-timing-fup.ptt, ovf-timing-tip_pge.ptt; libipt: "We can see timing packets
//!   between OVF and FUP but that's it"); the CYC count restarts at the OVF. Then:
//!   - PacketEn = 1: FUP(resume_ip), "the IP of the next instruction to execute after the
//!     overflow resolved" (ovf-fup.ptt: `ovf`, `fup(3: l1)`); no MODE.Exec or PIP may come
//!     between OVF and this FUP (pt_evt_find_ovf_fup would treat the OVF as disabled tracing).
//!   - PacketEn = 0: nothing; the next TIP.PGE ends the gap and is preceded by MODE.Exec
//!     (ovf-tip_pge.ptt: `ovf`, `mode.exec`, `tip.pge(3: l1)`).
//! - The first IP after OVF is never compressed against last-IP: it is sent as sext-48 (011b,
//!   the `3:` of the scenarios) or full (110b), so decoders that do and do not reset last-IP at
//!   OVF (libipt resets it, the SDM says compress only against IPs really sent) agree.
//! - TraceEn cleared during an overflow: the buffer drains completely (TraceEn = 0 flushes it)
//!   and the overflow resolves with PacketEn = 0: OVF and nothing else (ovf.ptt ends with a
//!   lone `ovf`; erratum APL11 names a TIP.PGD after that OVF as the bug). `finish` does the
//!   same at the end of the trace, so an overflow is never lost silently.
//! - The output unit stopping (ToPA STOP, error) loses what is still in the internal buffer,
//!   as the SDM says; `stop_without_packets` discards it and counts it.

use super::encode::encode;
use super::filter::{context_en, ip_filter, IpFilterResult};
use super::internal_buffer::{BufferConfig, BufferStats, DrainCredit, InternalBuffer};
use super::last_ip::LastIp;
use super::packet::{ExecMode, IpCompression, IpPayload, Packet};
use super::ret_stack::RetStack;
use super::rtit_ctl::{AddrRange, RtitCtl};
use super::tnt::{TntBuffer, SHORT_TNT_BITS};
use crate::insn_class::{BranchKind, ClassifiedInsn, FarKind};
use crate::system_flow::{RecordedBlock, SysBlock};
use crate::user_flow::{BlockEnd, ExecutedBlock};

/// TSC ticks per ART (crystal clock) tick: CPUID.15H reports EBX/EAX = ART_RATIO/1.
pub const ART_RATIO: u64 = 128;

/// MTC periods after which the time is sent as TSC + TMA instead of one MTC.
const MTC_GAP_FOR_TSC: u64 = 128;

/// The processor context that ContextEn and MODE.Exec depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// Current privilege level (0..=3).
    pub cpl: u8,
    /// CR3 (only the address bits matter for the CR3 filter and PIP).
    pub cr3: u64,
    pub mode: ExecMode,
}

impl Context {
    pub const USER64: Context = Context { cpl: 3, cr3: 0, mode: ExecMode::Bit64 };
    pub const KERNEL64: Context = Context { cpl: 0, cr3: 0, mode: ExecMode::Bit64 };
}

/// Everything the guest (or the plugin's options) configured: IA32_RTIT_CTL, CR3_MATCH and the
/// ADDRn ranges, plus the core:bus ratio reported in CBR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceConfig {
    pub ctl: RtitCtl,
    pub cr3_match: u64,
    pub addr: [AddrRange; 4],
    /// Number of ADDRn pairs the capability profile implements (CPUID.(14H,1):EAX[2:0]).
    pub num_ranges: usize,
    /// Core:bus ratio reported in CBR packets.
    pub cbr: u8,
}

impl Default for TraceConfig {
    fn default() -> Self {
        TraceConfig { ctl: RtitCtl::default(), cr3_match: 0, addr: [AddrRange::default(); 4], num_ranges: 2, cbr: 24 }
    }
}

/// Why an asynchronous transfer happened; decides the FUP IP (SDM Table 33-23).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncKind {
    /// External interrupt, NMI, trap-class exception: FUP = the next instruction that would
    /// have executed (the IP pushed on the stack).
    Interrupt { resume_ip: u64 },
    /// Fault-class exception: FUP = the faulting instruction.
    Fault { ip: u64 },
    /// INT n / INT3 / INTO / INT1: FUP = the software-interrupt instruction itself.
    SoftwareInterrupt { ip: u64 },
}

impl AsyncKind {
    /// The IP the event is attributed to: the FUP IP (SDM Table 33-23), also the BTS "from".
    pub fn fup_ip(self) -> u64 {
        match self {
            AsyncKind::Interrupt { resume_ip } => resume_ip,
            AsyncKind::Fault { ip } | AsyncKind::SoftwareInterrupt { ip } => ip,
        }
    }
}

/// Counters for reports and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TracerStats {
    pub packets: u64,
    pub bytes: u64,
    pub psbs: u64,
    pub tnt_bits: u64,
    pub compressed_rets: u64,
    pub tips: u64,
}

pub struct Tracer {
    cfg: TraceConfig,
    ctx: Context,
    /// TriggerEn is held at 0: a TraceStop range was hit, or the output unit stopped (ToPA STOP
    /// region full, output error).
    stopped: bool,
    /// IA32_RTIT_STATUS.Stopped from a TraceStop range.
    trace_stop_hit: bool,
    /// FilterEn as last evaluated (at the most recent IP the tracer saw).
    filter_en: bool,
    /// PacketEn as last evaluated.
    packet_en: bool,
    last_ip: LastIp,
    tnt: TntBuffer,
    ret: RetStack,
    /// The mode last reported by MODE.Exec since the last PSB, if any.
    mode_sent: Option<ExecMode>,
    /// Bytes since the last PSB (PacketByteCnt modulo the PSB period).
    psb_bytes: u64,
    /// PacketByteCnt as software left it for the next enable.
    preset_psb_bytes: u64,
    /// Time stamp counter value supplied by the caller, used by TSC packets.
    tsc: u64,
    /// CTC value (ART >> MTCFreq) of the last MTC or PSB+.
    last_mtc_ctc: Option<u64>,
    /// TSC at the last CYC packet (or at the last PSB+/enable).
    last_cyc_tsc: u64,
    out: Vec<u8>,
    /// When set, every packet is also recorded as a value (tests, golden streams).
    log: Option<Vec<Packet>>,
    stats: TracerStats,
    /// The internal buffer and drain model (`with_internal_buffer`). None: every packet goes
    /// to `out` at once and nothing overflows.
    ibuf: Option<InternalBuffer>,
    /// The next instruction to execute after the most recent event: the FUP IP after OVF.
    resume_ip: u64,
    /// Times `resume_ip` was set (the plugin keys code versions to the instruction at it).
    resume_seq: u64,
    /// OVF packets written, and the FUP IP after the last one (None: TIP.PGE follows).
    overflows: u64,
    last_ovf_fup: Option<u64>,
    /// The next IP packet must not be compressed against last-IP (the first one after OVF).
    full_ip_next: bool,
    /// `without_shortcuts`: every event takes the general path (the reference for tests).
    no_shortcuts: bool,
    /// The next enable inserts a PSB+ even with a non-zero PacketByteCnt (PendPSB).
    inject_psb: bool,
    /// The C-state (MWAIT-hint encoding) a traced PWRE reported and no PWRX has closed yet.
    sleep_state: Option<u8>,
    /// Event Trace (IA32_RTIT_CTL[31] EventEn): RFLAGS.IF as last known, the IF the last
    /// MODE.Exec since the PSB carried, the IF at the boundary being reported (`stage_if`),
    /// and the CFE (+ EVD) of the next transfer (`cfe_interrupt`, `cfe_iret`).
    if_flag: bool,
    if_sent: Option<bool>,
    staged_if: Option<bool>,
    /// RFLAGS.IF in the handler of the next asynchronous event (`stage_event_if`).
    event_if: Option<bool>,
    pending_cfe: Option<PendingCfe>,
    pending_iret: Option<PendingCfe>,
    /// What IP payloads are relative to (`set_ip_base`): the CS base of the code the tracer is
    /// in when CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0, else 0; and the base after the next far
    /// transfer or event (`stage_ip_base`).
    ip_base: u64,
    staged_ip_base: Option<u64>,
}

/// The Event Trace packets of the next asynchronous event or IRET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PendingCfe {
    kind: u8,
    vector: u8,
    /// EVD before the CFE: (type, payload).
    evd: Option<(u8, u64)>,
    /// The FUP IP for an IRET (a far transfer has no FUP otherwise).
    fup: Option<u64>,
}

impl Tracer {
    /// A tracer in context `ctx`. Tracing starts only with `enable`, whatever ctl.TraceEn says.
    pub fn new(mut cfg: TraceConfig, ctx: Context) -> Self {
        cfg.ctl.set_trace_en(false);
        Tracer {
            cfg,
            ctx,
            stopped: false,
            trace_stop_hit: false,
            filter_en: true,
            packet_en: false,
            last_ip: LastIp::default(),
            tnt: TntBuffer::default(),
            ret: RetStack::default(),
            mode_sent: None,
            psb_bytes: 0,
            preset_psb_bytes: 0,
            tsc: 0,
            last_mtc_ctc: None,
            last_cyc_tsc: 0,
            out: Vec::with_capacity(64 * 1024),
            log: None,
            stats: TracerStats::default(),
            ibuf: None,
            resume_ip: 0,
            resume_seq: 0,
            overflows: 0,
            last_ovf_fup: None,
            full_ip_next: false,
            no_shortcuts: false,
            inject_psb: false,
            sleep_state: None,
            if_flag: false,
            if_sent: None,
            staged_if: None,
            event_if: None,
            pending_cfe: None,
            pending_iret: None,
            ip_base: 0,
            staged_ip_base: None,
        }
    }

    /// Never take the steady-state shortcuts of `branch` and `direct_steady` (issue 13): the
    /// general evaluation of every event, the reference the shortcuts must equal byte for byte
    /// (differential tests).
    pub fn without_shortcuts(mut self) -> Self {
        self.no_shortcuts = true;
        self
    }

    /// Route packets through a bounded internal buffer with the drain model of `cfg`, and
    /// overflow when it fills (see the module documentation). Call before the first event.
    /// `output()` / `take_output()` then return only the bytes the drain engine released.
    pub fn with_internal_buffer(mut self, cfg: BufferConfig) -> Self {
        let mut buf = InternalBuffer::new(cfg);
        if !self.out.is_empty() {
            // Bytes produced before the buffer existed are already on their way out.
            buf.preload_handoff(&std::mem::take(&mut self.out));
        }
        self.ibuf = Some(buf);
        self
    }

    /// The internal buffer, if one was configured.
    pub fn internal_buffer(&self) -> Option<&InternalBuffer> {
        self.ibuf.as_ref()
    }

    /// Internal-buffer counters (report them at exit), if a buffer was configured.
    pub fn buffer_stats(&self) -> Option<BufferStats> {
        self.ibuf.as_ref().map(InternalBuffer::stats)
    }

    /// Deterministic drain: `units` of guest progress (instructions or virtual-time ticks, as
    /// the buffer's bandwidth was configured) passed since the last call. No-op without a buffer.
    pub fn credit(&mut self, units: u64) {
        if let Some(buf) = self.ibuf.as_mut() {
            buf.credit(units);
        }
    }

    /// `bytes` of drain bandwidth became available (real-time mode). No-op without a buffer.
    pub fn credit_bytes(&mut self, bytes: u64) {
        if let Some(buf) = self.ibuf.as_mut() {
            buf.credit_bytes(bytes);
        }
    }

    /// Real-time drain: collect the credit the drainer thread granted since the last call.
    pub fn credit_from(&mut self, credit: &mut DrainCredit) {
        if let Some(buf) = self.ibuf.as_mut() {
            buf.credit_bytes(credit.take());
        }
    }

    fn set_resume(&mut self, ip: u64) {
        self.resume_ip = ip;
        self.resume_seq = self.resume_seq.wrapping_add(1);
    }

    /// The next instruction to execute after the most recent event, and how many times it was
    /// set (the plugin's code versions key on it, issue 19).
    pub fn resume_point(&self) -> (u64, u64) {
        (self.resume_ip, self.resume_seq)
    }

    /// OVF packets written so far, and the FUP IP after the last one (None: a TIP.PGE follows).
    pub fn overflows(&self) -> (u64, Option<u64>) {
        (self.overflows, self.last_ovf_fup)
    }

    fn overflowed(&self) -> bool {
        self.ibuf.as_ref().is_some_and(InternalBuffer::overflowed)
    }

    /// At the start of an event: resolve an overflow once the buffer has room again (while
    /// TriggerEn = 1; with TriggerEn = 0 no packet, OVF included, is generated).
    fn service_overflow(&mut self) {
        if self.ibuf.as_ref().is_some_and(InternalBuffer::can_resume) && self.trigger_en() {
            self.resolve_overflow();
        }
    }

    /// The overflow resolved at `resume_ip` (module documentation; SDM §33.4.2.16; libipt
    /// ovf-fup.ptt, ovf-tip_pge.ptt, ovf-timing-*.ptt).
    fn resolve_overflow(&mut self) {
        // The results of branches that retired during the overflow are lost with their packets.
        self.tnt.clear();
        if let Some(buf) = self.ibuf.as_mut() {
            buf.end_overflow();
        }
        self.emit_raw(Packet::Ovf);
        self.overflows += 1;
        self.last_ovf_fup = self.packet_en.then_some(self.resume_ip);
        // OVF resets last-IP and the RET-compression stack (pt-packets.md §5; libipt resets its
        // decoder state at OVF, pt_evt_reset) and the cycle count.
        self.last_ip.reset();
        self.full_ip_next = true;
        self.ret.clear();
        self.last_cyc_tsc = self.tsc;
        if self.cfg.ctl.tsc_en() {
            // Timing packets may sit between OVF and FUP/TIP.PGE (ovf-timing-fup.ptt); the MTCs of
            // the gap were lost, so time is resent in full.
            self.tsc_packets(self.cfg.ctl.mtc_en());
            self.last_mtc_ctc = Some(self.art() >> self.cfg.ctl.mtc_freq());
        }
        if self.packet_en {
            // FUP: the next instruction to execute after the overflow resolved (ovf-fup.ptt).
            let payload = self.compress_ip(self.resume_ip);
            self.emit_raw(Packet::Fup(payload));
        } else {
            // Nothing until TIP.PGE, which states the mode again (ovf-tip_pge.ptt).
            self.mode_sent = None;
        }
    }

    /// TraceEn cleared or the trace ended: everything buffered drains; an overflow still in
    /// progress resolves with OVF alone (ovf.ptt; APL11).
    fn drain_all_and_resolve(&mut self) {
        let Some(buf) = self.ibuf.as_mut() else { return };
        buf.flush();
        if buf.overflowed() {
            let packet_en = std::mem::replace(&mut self.packet_en, false);
            self.resolve_overflow();
            self.packet_en = packet_en;
            if let Some(buf) = self.ibuf.as_mut() {
                buf.flush();
            }
        }
    }

    /// Record every packet as a value as well (for tests and golden streams).
    pub fn with_packet_log(mut self) -> Self {
        self.log = Some(Vec::new());
        self
    }

    pub fn config(&self) -> &TraceConfig {
        &self.cfg
    }

    pub fn context(&self) -> Context {
        self.ctx
    }

    pub fn packet_en(&self) -> bool {
        self.packet_en
    }

    pub fn trace_en(&self) -> bool {
        self.cfg.ctl.trace_en()
    }

    pub fn stopped(&self) -> bool {
        self.stopped
    }

    pub fn stats(&self) -> TracerStats {
        self.stats
    }

    /// Advance the time stamp counter. The Always Running Timer (ART, the crystal clock behind MTC
    /// and TMA) runs at TSC / ART_RATIO (CPUID.15H: EBX/EAX = ART_RATIO/1), and the core clock
    /// behind CYC counts TSC ticks.
    pub fn set_tsc(&mut self, tsc: u64) {
        self.tsc = tsc;
    }

    /// TSC[55:0], then (with MTC) TMA: CTC[15:0] at that TSC and the fast counter, the TSC ticks
    /// since that ART tick (decoders take CTC time = TSC - FC, e.g. perf's intel_pt_calc_tma).
    fn tsc_packets(&mut self, with_tma: bool) {
        self.emit_raw(Packet::Tsc { tsc: self.tsc & ((1 << 56) - 1) });
        if with_tma {
            let fc = (self.tsc % ART_RATIO) as u16;
            self.emit_raw(Packet::Tma { ctc: self.art() as u16, fast_counter: fc });
        }
    }

    /// The Always Running Timer: TSC / ART_RATIO.
    fn art(&self) -> u64 {
        self.tsc / ART_RATIO
    }

    /// Timing packets due before the packets of an event (SDM §33.4.2.11 MTC, §33.4.2.14 CYC):
    /// MTC when CTC[MTCFreq] advanced since the last MTC (one MTC carrying the current CTC[7:0]
    /// value; periods that elapsed between two events are not each reported), then CYC with
    /// the cycles since the last CYC once they reach the CycThresh threshold.
    fn timing_packets(&mut self) {
        let ctl = self.cfg.ctl;
        if ctl.mtc_en() {
            let ctc = self.art() >> ctl.mtc_freq();
            if let Some(last) = self.last_mtc_ctc {
                if ctc != last {
                    if ctc.wrapping_sub(last) < MTC_GAP_FOR_TSC || !ctl.tsc_en() {
                        self.emit_raw(Packet::Mtc { ctc: ctc as u8 });
                    } else {
                        // Hardware sends an MTC every period while tracing; the model only
                        // reports time at events. Past half the 8-bit MTC range a decoder could
                        // no longer count the periods, so the time goes out as TSC + TMA (the
                        // pair hardware sends at enable) instead of a burst of MTCs.
                        self.tsc_packets(true);
                    }
                }
            }
            self.last_mtc_ctc = Some(ctc);
        }
        if ctl.cyc_en() {
            let cycles = self.tsc.saturating_sub(self.last_cyc_tsc);
            // CycThresh n > 0: a CYC only once at least 2^(n-1) cycles passed.
            let threshold = match ctl.cyc_thresh() {
                0 => 1,
                n => 1u64 << (n - 1),
            };
            if cycles >= threshold {
                self.emit_raw(Packet::Cyc { value: cycles });
                self.last_cyc_tsc = self.tsc;
            }
        }
    }

    /// The packets generated so far and not yet taken (pending TNT bits are not included).
    /// With an internal buffer: only the bytes its drain engine released (the hand-off).
    pub fn output(&self) -> &[u8] {
        match &self.ibuf {
            None => &self.out,
            Some(buf) => buf.handoff(),
        }
    }

    /// Move the generated bytes out, leaving an empty buffer. With an internal buffer: the
    /// hand-off bytes; bytes still pending in the internal buffer stay there.
    pub fn take_output(&mut self) -> Vec<u8> {
        match self.ibuf.as_mut() {
            None => std::mem::replace(&mut self.out, Vec::with_capacity(64 * 1024)),
            Some(buf) => buf.take_handoff(),
        }
    }

    /// Forget the bytes `output` returned (they were copied out), keeping the allocation: the
    /// per-block hand-off of the full-system plugin allocates nothing.
    pub fn clear_output(&mut self) {
        match self.ibuf.as_mut() {
            None => self.out.clear(),
            Some(buf) => {
                let n = buf.handoff().len();
                buf.consume(n);
            }
        }
    }

    /// Drain the recorded packets (only with `with_packet_log`).
    pub fn take_packet_log(&mut self) -> Vec<Packet> {
        self.log.as_mut().map(std::mem::take).unwrap_or_default()
    }

    // ---- enable logic (§33.2.6) ----

    /// No internal buffer, no ADDRn range in use (FilterEn = 1, no TraceStop), no MTC and no
    /// CYC: a near branch with PacketEn = 1 produces only its COFI packets (`branch`).
    /// DisTNT clear as well: `direct_steady` records TNT bits unconditionally.
    fn steady(&self) -> bool {
        const CYC_EN: u64 = 1 << 1;
        const ADDR_CFG: u64 = 0xFFFF << 32;
        const DIS_TNT: u64 = 1 << 55;
        self.ibuf.is_none() && self.cfg.ctl.0 & (CYC_EN | ADDR_CFG | DIS_TNT) == 0 && !self.no_shortcuts && self.mtc_quiet()
    }

    /// No MTC is due at the current time: MTCEn = 0, or the CTC bit MTCFreq selects has not
    /// moved since the last timing evaluation (`timing_packets` would send nothing and change
    /// nothing).
    #[inline]
    fn mtc_quiet(&self) -> bool {
        let ctl = self.cfg.ctl;
        !ctl.mtc_en() || self.last_mtc_ctc == Some(self.art() >> ctl.mtc_freq())
    }

    /// The time the tracer was last given (`set_tsc`).
    pub fn tsc(&self) -> u64 {
        self.tsc
    }

    /// TriggerEn = TraceEn & !Stopped (no PTTT/trigger inputs are modelled).
    fn trigger_en(&self) -> bool {
        self.cfg.ctl.trace_en() && !self.stopped
    }

    fn compute_packet_en(&self) -> bool {
        self.trigger_en() && context_en(&self.cfg, &self.ctx) && self.filter_en && self.cfg.ctl.branch_en()
    }

    /// Evaluate the IP filter at `ip`; returns true if a TraceStop range was entered.
    fn eval_ip(&mut self, ip: u64) -> bool {
        // The ranges are compared with IPs of the type the IP payloads carry: with LIP = 0 the
        // offset from the CS base (SDM Vol. 3C §33.3.1.1: "IP comparison logic, for IP
        // filtering and TraceStop range calculation, is based on the same IP type as these IP
        // packets").
        let IpFilterResult { filter_en, trace_stop } = ip_filter(&self.cfg, crate::cs_base::offset(self.ip_base, ip));
        self.filter_en = filter_en;
        trace_stop
    }

    // ---- packet emission ----

    /// Emit `p` after the pending TNT bits; false if the internal buffer dropped it.
    fn emit(&mut self, p: Packet) -> bool {
        if !matches!(p, Packet::Tnt { .. }) {
            self.flush_tnt();
        }
        self.emit_raw(p)
    }

    /// Append one packet; false if the internal buffer dropped it (overflow). Only packets that
    /// reach the buffer count in the statistics, PacketByteCnt and the packet log.
    fn emit_raw(&mut self, p: Packet) -> bool {
        let n = match self.ibuf.as_mut() {
            None => {
                let before = self.out.len();
                encode(&p, &mut self.out);
                self.out.len() - before
            }
            Some(buf) => match buf.push_packet(&p) {
                Some(n) => n,
                None => return false,
            },
        } as u64;
        self.stats.packets += 1;
        self.stats.bytes += n;
        self.psb_bytes += n;
        if let Some(log) = self.log.as_mut() {
            log.push(p);
        }
        true
    }

    /// Compress `ip` against last-IP, except for the first IP after OVF, which is sent as
    /// sext-48, or full when not canonical (module documentation).
    fn compress_ip(&mut self, ip: u64) -> IpPayload {
        let ip = crate::cs_base::offset(self.ip_base, ip);
        if std::mem::take(&mut self.full_ip_next) {
            if let Some(p) = self.last_ip.compress_with(ip, IpCompression::Sext48) {
                return p;
            }
            if let Some(p) = self.last_ip.compress_with(ip, IpCompression::Full) {
                return p;
            }
        }
        self.last_ip.compress(ip)
    }

    fn emit_ip(&mut self, make: fn(IpPayload) -> Packet, ip: Option<u64>) {
        self.flush_tnt();
        let payload = match ip {
            Some(ip) => self.compress_ip(ip),
            None => IpPayload::SUPPRESSED,
        };
        self.emit_raw(make(payload));
    }

    /// One conditional-branch or compressed-RET result. IA32_RTIT_CTL[55] DisTNT (CPUID.(14H,0):
    /// EBX[8]): no TNT packets at all; a RET that RET compression covers then produces no
    /// packet either (perf's Documentation/perf-intel-pt.txt, "notnt": without TNT packets
    /// "FUP, TIP, TIP.PGE and TIP.PGD packets still indicate asynchronous control flow, and (if
    /// return compression is disabled - see noretcomp) return statements").
    fn tnt_bit(&mut self, taken: bool) {
        if self.cfg.ctl.dis_tnt() {
            return;
        }
        self.stats.tnt_bits += 1;
        if let Some((bits, count)) = self.tnt.push(taken) {
            self.emit_tnt(bits, count);
        }
    }

    /// A short TNT of `count` (1 to 6) results, full or flushed (the most frequent packet):
    /// `emit_raw` without the generic encoder when nothing but the output sees it.
    #[inline]
    fn emit_tnt(&mut self, bits: u8, count: u8) {
        if self.ibuf.is_none() && self.log.is_none() {
            super::encode::push_tnt_short(u64::from(bits), count, &mut self.out);
            self.stats.packets += 1;
            self.stats.bytes += 1;
            self.psb_bytes += 1;
        } else {
            self.emit_raw(Packet::Tnt { bits, count });
        }
    }

    /// Write out pending TNT bits (before any other packet, and when tracing stops).
    pub fn flush_tnt(&mut self) {
        if let Some((bits, count)) = self.tnt.take() {
            // (At most six results: a short TNT, `emit_tnt`'s fast path.)
            self.emit_tnt(bits, count);
        }
    }

    /// MODE.Exec when the mode (or, with EventEn, RFLAGS.IF) differs from the last one sent since
    /// the PSB. Without EventEn the IF bit is 0 and IF changes send nothing.
    fn mode_exec_if_needed(&mut self) {
        let event_en = self.cfg.ctl.event_en();
        let if_differs = event_en && self.if_sent != Some(self.if_flag);
        if (self.mode_sent != Some(self.ctx.mode) || if_differs)
            && self.emit(Packet::ModeExec { mode: self.ctx.mode, if_flag: event_en && self.if_flag })
        {
            self.mode_sent = Some(self.ctx.mode);
            self.if_sent = Some(self.if_flag);
        }
    }

    fn pip(&mut self) {
        // PIP carries CR3[51:5] (§33.4.2.13); CR3[63:52] are not address bits (CR3[62:61] are
        // the LAM enables QEMU keeps). Found by the msr_sequences fuzzer
        // (fuzz/artifacts-found/msr_sequences-pip-cr3-lam-bits).
        self.emit(Packet::Pip { cr3: self.ctx.cr3 & 0x000F_FFFF_FFFF_FFE0, nr: false });
    }

    /// PSB+ (§33.4.2.17 and Table 33-50 "PSB+"): PSB, TSC, PIP, CBR, and when PacketEn the
    /// MODE.Exec and FUP of the current IP, then PSBEND. Resets last-IP and the RET stack.
    /// With an internal buffer the PSB+ can be cut short by an overflow (psb-ovf-fup.ptt); if
    /// the PSB itself was dropped, PacketByteCnt keeps counting and the PSB+ stays due.
    fn psb_plus(&mut self, ip: Option<u64>) {
        self.flush_tnt();
        let psb_sent = self.emit_raw(Packet::Psb);
        if psb_sent {
            self.stats.psbs += 1;
            // Every decoder resets its last-IP at PSB.
            self.full_ip_next = false;
        }
        self.last_ip.reset();
        self.ret.clear();
        self.mode_sent = None;
        self.if_sent = None;
        if self.cfg.ctl.tsc_en() {
            self.tsc_packets(self.cfg.ctl.mtc_en());
        }
        self.last_mtc_ctc = Some(self.art() >> self.cfg.ctl.mtc_freq());
        self.last_cyc_tsc = self.tsc;
        if self.cfg.ctl.os() && context_en(&self.cfg, &self.ctx) {
            self.pip();
        }
        self.emit_raw(Packet::Cbr { ratio: self.cfg.cbr });
        if self.packet_en {
            if let Some(ip) = ip {
                let if_flag = self.cfg.ctl.event_en() && self.if_flag;
                if self.emit_raw(Packet::ModeExec { mode: self.ctx.mode, if_flag }) {
                    self.mode_sent = Some(self.ctx.mode);
                    self.if_sent = Some(self.if_flag);
                }
                let payload = self.compress_ip(ip);
                self.emit_raw(Packet::Fup(payload));
            }
        }
        self.emit_raw(Packet::PsbEnd);
        // PacketByteCnt counts from the PSB on: the PSB+ bytes belong to the new period.
        if psb_sent {
            self.psb_bytes = 0;
        }
    }

    /// Insert PSB+ if the byte count crossed the PSBFreq period; `ip` is the next instruction.
    /// Not during an overflow: the PSB+ follows once it resolved.
    fn maybe_psb(&mut self, ip: u64) {
        if self.trigger_en() && self.psb_bytes >= self.cfg.ctl.psb_period_bytes() && !self.overflowed() {
            self.psb_plus(Some(ip));
        }
    }

    /// PacketEn 0 -> 1 at `ip`: MODE.Exec (if not yet sent or changed), TIP.PGE(ip).
    fn pge(&mut self, ip: u64) {
        self.mode_exec_if_needed();
        self.emit_ip(Packet::TipPge, Some(ip));
    }

    /// TraceStop range reached (SDM §33.2.5.3 "TraceStop"): TIP.PGD (if tracing), TraceStop;
    /// IA32_RTIT_STATUS.Stopped = 1, which clears TriggerEn, and FilterEn is forced to 0.
    fn trace_stop(&mut self, was_enabled: bool, pgd_ip: Option<u64>) {
        if was_enabled {
            self.emit_ip(Packet::TipPgd, pgd_ip);
        }
        self.emit(Packet::TraceStop);
        self.stopped = true;
        self.trace_stop_hit = true;
        self.filter_en = false;
        self.packet_en = false;
    }

    /// A TraceStop range was reached since tracing was last enabled (STATUS.Stopped).
    pub fn trace_stop_hit(&self) -> bool {
        self.trace_stop_hit
    }

    // ---- events ----

    /// TraceEn 0 -> 1 (WRMSR to IA32_RTIT_CTL) with the next instruction at `next_ip`:
    /// PSB+ (without FUP, since PacketEn was 0), then MODE.Exec and TIP.PGE if PacketEn.
    pub fn enable(&mut self, next_ip: u64) {
        if self.cfg.ctl.trace_en() {
            return;
        }
        self.cfg.ctl.set_trace_en(true);
        self.stopped = false;
        self.trace_stop_hit = false;
        self.packet_en = false;
        self.set_resume(next_ip);
        // PSB+ at enable when IA32_RTIT_STATUS.PacketByteCnt is 0 (what Linux and a fresh
        // configuration have). A non-zero count, restored by software (e.g. XRSTORS of a saved
        // trace context), continues the running period instead (shared/reference/pt-packets.md §4;
        // the SDM text read so far is not explicit about this case).
        let preset = std::mem::take(&mut self.preset_psb_bytes);
        if preset == 0 || std::mem::take(&mut self.inject_psb) {
            self.psb_plus(None);
        } else {
            self.psb_bytes = preset;
            self.mode_sent = None;
        }
        let stop = self.eval_ip(next_ip);
        if stop {
            self.trace_stop(false, None);
            return;
        }
        self.packet_en = self.compute_packet_en();
        if self.packet_en {
            self.pge(next_ip);
        }
    }

    /// TraceEn 1 -> 0 by a WRMSR at `ip`: FUP(ip), TIP.PGD (IP suppressed) if PacketEn;
    /// everything pending is flushed, the internal buffer included (an overflow in progress
    /// ends with a lone OVF).
    pub fn disable(&mut self, ip: u64) {
        if !self.cfg.ctl.trace_en() {
            return;
        }
        if self.packet_en {
            self.emit_ip(Packet::Fup, Some(ip));
            self.emit_ip(Packet::TipPgd, None);
        }
        self.flush_tnt();
        self.cfg.ctl.set_trace_en(false);
        self.packet_en = false;
        self.drain_all_and_resolve();
    }

    /// Replace the configuration (IA32_RTIT_CTL without TraceEn, CR3_MATCH, ADDRn) while
    /// TraceEn = 0; hardware only accepts such changes with tracing off.
    pub fn reconfigure(&mut self, mut cfg: TraceConfig) {
        if self.cfg.ctl.trace_en() {
            return;
        }
        cfg.ctl.set_trace_en(false);
        self.cfg = cfg;
    }

    /// Set the current context without generating packets (tracing off, or start-up).
    pub fn set_context(&mut self, ctx: Context) {
        if !self.cfg.ctl.trace_en() {
            self.ctx = ctx;
        }
    }

    /// Bytes written since the last PSB (IA32_RTIT_STATUS.PacketByteCnt).
    pub fn packet_byte_count(&self) -> u64 {
        self.psb_bytes
    }

    /// PacketByteCnt reached the PSBFreq period and the PSB+ has not been inserted yet (it
    /// follows at the next instruction boundary while tracing; with TraceEn cleared it stays
    /// due: IA32_RTIT_STATUS.PendPSB with InjectPsbPmiOnEnable).
    pub fn psb_due(&self) -> bool {
        self.psb_bytes >= self.cfg.ctl.psb_period_bytes()
    }

    /// IA32_RTIT_STATUS.PendPSB = 1 and InjectPsbPmiOnEnable = 1 at the next TraceEn 0 -> 1
    /// (only while TraceEn = 0): that enable inserts a PSB+ whatever PacketByteCnt holds.
    pub fn inject_psb_at_enable(&mut self) {
        if !self.cfg.ctl.trace_en() {
            self.inject_psb = true;
        }
    }

    /// Software wrote IA32_RTIT_STATUS.PacketByteCnt (only while TraceEn = 0); the next enable
    /// starts counting from it.
    pub fn set_packet_byte_count(&mut self, n: u64) {
        if !self.cfg.ctl.trace_en() {
            self.preset_psb_bytes = n;
        }
    }

    /// FilterEn and ContextEn as IA32_RTIT_STATUS reports them.
    pub fn status_bits(&self) -> (bool, bool, bool) {
        (self.filter_en, context_en(&self.cfg, &self.ctx), self.trigger_en())
    }

    /// TraceStop or an output error ended packet generation: TriggerEn = 0 without packets
    /// (the output unit already stopped accepting bytes). What is still in the internal buffer
    /// is lost, as in hardware (seed 000 §33.2.7.2), and counted in `BufferStats::discarded_bytes`.
    pub fn stop_without_packets(&mut self) {
        self.flush_tnt();
        self.stopped = true;
        self.packet_en = false;
        if let Some(buf) = self.ibuf.as_mut() {
            buf.discard_all();
        }
    }

    /// WRMSR to IA32_RTIT_CTL at `ip` (next instruction `nlip`) with `value` (already checked
    /// by the caller for #GP conditions). Setting TraceEn enables at `nlip` with the new
    /// configuration; clearing it disables at the WRMSR (FUP(ip), TIP.PGD); other fields only
    /// change while TraceEn = 0, as hardware requires.
    pub fn write_ctl(&mut self, ip: u64, nlip: u64, value: RtitCtl) {
        let was_on = self.cfg.ctl.trace_en();
        if was_on {
            self.disable(ip);
        }
        let mut ctl = value;
        ctl.set_trace_en(false);
        self.cfg.ctl = ctl;
        if value.trace_en() {
            self.enable(nlip);
        }
    }

    /// A near branch (or any instruction whose class is not a far transfer) retired at `ip`,
    /// and execution continues at `next`.
    pub fn branch(&mut self, ip: u64, nlip: u64, kind: BranchKind, next: u64) {
        let _ = ip;
        if self.packet_en && self.steady() {
            // PacketEn = 1 implies TriggerEn = 1 and that ContextEn and FilterEn held at the last
            // evaluation; a near branch changes neither the context nor (without ranges) FilterEn,
            // so PacketEn stays 1, and without MTC/CYC or an internal buffer nothing but the
            // COFI's own packets and a due PSB+ can follow: the general path below, minus the
            // evaluations whose outcome is known (issue 13: this is most blocks of a trace).
            self.set_resume(next);
            self.cofi_packets(nlip, kind, next);
            self.maybe_psb(next);
            return;
        }
        self.service_overflow();
        self.set_resume(next);
        if !self.trigger_en() {
            return;
        }
        let was = self.packet_en;
        let stop = self.eval_ip(next);
        let now = self.compute_packet_en();
        if was || now {
            self.timing_packets();
        }
        if stop {
            // The branch's own result precedes the disable.
            if was {
                if let BranchKind::Conditional { .. } = kind {
                    self.tnt_bit(next != nlip);
                }
            }
            let pgd_ip = match kind {
                BranchKind::Conditional { .. } => None,
                _ => Some(next),
            };
            self.trace_stop(was, pgd_ip);
            return;
        }
        match (was, now) {
            (true, true) => self.cofi_packets(nlip, kind, next),
            (true, false) => {
                // Leaving the filter range (§33.2.5.3): TIP.PGD, with the target IP for direct and
                // indirect branches, suppressed for a conditional branch.
                let pgd_ip = match kind {
                    BranchKind::Conditional { .. } => {
                        self.tnt_bit(next != nlip);
                        None
                    }
                    _ => Some(next),
                };
                self.emit_ip(Packet::TipPgd, pgd_ip);
                self.packet_en = false;
            }
            (false, true) => {
                self.packet_en = true;
                self.pge(next);
            }
            (false, false) => {}
        }
        self.maybe_psb(next);
    }

    /// `branch` for straight-line code, a conditional branch (`conditional`; `taken`: the
    /// successor is not the NLIP) or a direct JMP/CALL (`push`: the NLIP a CALL pushes on the
    /// RET-compression stack, 0 for none) in the steady state (PacketEn = 1, `steady`), where
    /// the general path reduces to exactly this; returns false, having done nothing, otherwise.
    /// Written without branches on the guest's outcome: the host would mispredict them as often
    /// as the guest's own branches go either way.
    #[inline(always)]
    pub fn direct_steady(&mut self, next: u64, conditional: bool, taken: bool, push: u64) -> bool {
        if !(self.packet_en && self.steady()) {
            return false;
        }
        self.set_resume(next);
        self.stats.tnt_bits += u64::from(conditional);
        if let Some((bits, count)) = self.tnt.push_if(conditional, taken) {
            self.emit_tnt(bits, count);
        }
        if push != 0 {
            self.ret.push(push);
        }
        self.maybe_psb(next);
        true
    }

    /// A run of blocks in the steady state of `direct_steady` (issue 13): PacketEn = 1, no
    /// timing packets, no internal buffer, no packet log and no PSB+ due. The run keeps the
    /// per-block bookkeeping in registers and writes it back when it ends (`Drop`); None when
    /// the tracer is not in that state (the caller takes the general path).
    #[inline]
    pub fn steady_run(&mut self) -> Option<SteadyRun<'_>> {
        if self.cfg.ctl.mtc_en() {
            return None; // (the caller's clock moves during the run)
        }
        self.steady_run_at_fixed_time()
    }

    /// As `steady_run`, for a caller that does not change the time (`set_tsc`) while the run
    /// lasts, or changes it only through `SteadyRun::retired_at` (which sends the MTC packets
    /// a new time calls for): the run starts only if no MTC is due already (`mtc_quiet`).
    #[inline]
    pub fn steady_run_at_fixed_time(&mut self) -> Option<SteadyRun<'_>> {
        if !(self.packet_en && self.steady() && self.log.is_none() && self.trigger_en()) {
            return None;
        }
        let period = self.cfg.ctl.psb_period_bytes();
        let psb_room = period.checked_sub(self.psb_bytes).filter(|&r| r > 0)?;
        Some(SteadyRun { tnt: self.tnt, resume_ip: self.resume_ip, resumes: 0, tnt_packets: 0, compressed_rets: 0, psb_room, t: self })
    }

    /// After a steady run ended because the PSB period was reached: PSB+ at `ip` (as
    /// `direct_steady` does at the end of the block).
    pub fn psb_if_due(&mut self, ip: u64) {
        self.maybe_psb(ip);
    }

    fn cofi_packets(&mut self, nlip: u64, kind: BranchKind, next: u64) {
        match kind {
            BranchKind::None | BranchKind::AlwaysFaults | BranchKind::DirectJump { .. } => {}
            BranchKind::Conditional { .. } => self.tnt_bit(next != nlip),
            BranchKind::DirectCall { target } => {
                // A CALL with displacement 0 is the get-IP idiom and is not pushed (§33.4.2.2).
                if target != nlip {
                    self.ret.push(nlip);
                }
            }
            BranchKind::IndirectJump => self.tip(next),
            BranchKind::IndirectCall => {
                self.ret.push(nlip);
                self.tip(next);
            }
            BranchKind::Return => {
                if !self.cfg.ctl.dis_retc() && self.ret.try_compress(next) {
                    self.stats.compressed_rets += 1;
                    self.tnt_bit(true);
                } else {
                    // Decoders differ on whether an uncompressed RET pops their stack; clearing
                    // ours keeps every later compressed RET unambiguous for all of them.
                    self.ret.clear();
                    self.tip(next);
                }
            }
            BranchKind::Far(_) | BranchKind::SoftwareInterrupt => self.tip(next),
        }
    }

    fn tip(&mut self, ip: u64) {
        self.stats.tips += 1;
        if self.ibuf.is_none() && self.log.is_none() {
            // `emit_ip(Packet::Tip, ..)` when nothing but the output sees it: encoded without
            // the generic encoder (as `emit_tnt`).
            self.flush_tnt();
            let payload = self.compress_ip(ip);
            let before = self.out.len();
            super::encode::push_ip(super::encode::opcode::TIP, payload, &mut self.out);
            let n = (self.out.len() - before) as u64;
            self.stats.packets += 1;
            self.stats.bytes += n;
            self.psb_bytes += n;
        } else {
            self.emit_ip(Packet::Tip, Some(ip));
        }
    }

    /// A far transfer (SYSCALL/SYSRET/IRET/far JMP, CALL, RET, ...) retired and execution
    /// continues at `next` in context `to`. Intel PT sends no FUP for these (§33.2.1.3):
    /// PIP if CR3 changed and OS=1, MODE.Exec if the mode changed, then TIP(next); TIP.PGD with
    /// the IP suppressed if the destination is not traced; TIP.PGE(next) if only it is.
    pub fn far_transfer(&mut self, kind: FarKind, next: u64, to: Context) {
        let _ = kind;
        self.transfer(None, next, to);
    }

    /// An asynchronous transfer (interrupt, exception, INT n) to `handler` in context `to`.
    pub fn async_event(&mut self, why: AsyncKind, handler: u64, to: Context) {
        self.transfer(Some(why.fup_ip()), handler, to);
    }

    fn transfer(&mut self, fup: Option<u64>, next: u64, to: Context) {
        self.service_overflow();
        self.set_resume(next);
        let was = self.packet_en;
        let cr3_changed = to.cr3 != self.ctx.cr3;
        self.ctx = to;
        // The FUP binds to the source (old CS); TIP, TIP.PGE, TIP.PGD and a PSB+'s FUP to the
        // destination (the CS the transfer loaded).
        let fup_base = self.ip_base;
        if let Some(b) = self.staged_ip_base.take() {
            self.ip_base = b;
        }
        // The CFE of this transfer: an interrupt's (announced before the IRET it may follow
        // is retired) or an IRET's.
        let cfe = if fup.is_some() { self.pending_cfe.take() } else { self.pending_iret.take() };
        // RFLAGS.IF after the transfer (an interrupt gate, IRET, SYSCALL's FMASK change it): a
        // MODE.Exec among the middle packets reports it (EventEn).
        // An asynchronous event (with its FUP) takes the handler's IF, and the IF staged at
        // this boundary is then stale; a far transfer takes the staged IF and leaves the
        // handler's IF to the event that may follow it (an IRET then an interrupt at once).
        let staged = self.staged_if.take();
        let new_if = if fup.is_some() { self.event_if.take().or(staged) } else { staged };
        if let Some(i) = new_if {
            self.if_flag = i;
        }
        if !self.trigger_en() {
            return;
        }
        let stop = self.eval_ip(next);
        let now = self.compute_packet_en();
        if was || now {
            self.timing_packets();
        }
        if was {
            let mut fup = fup;
            if let Some(c) = cfe.filter(|_| self.cfg.ctl.event_en()) {
                // Event Trace: [EVD], then CFE. An interrupt or exception already has its FUP
                // (the source of the asynchronous branch): CFE IP = 0, and the decoder attaches
                // the event to that FUP, which stays the branch source. An IRET has no FUP of its
                // own: CFE IP = 1 and a FUP with the IRET's IP, bound to the CFE (libipt
                // pt_evt_decode_cfe: IP = 1 binds the next FUP to the CFE, and a bound FUP starts
                // no asynchronous branch; IP = 0 while tracing attaches to the next FUP).
                if let Some((kind, payload)) = c.evd {
                    self.emit(Packet::Evd { kind, payload });
                }
                let own_fup = fup.is_none() && c.fup.is_some();
                self.emit(Packet::Cfe { ip: own_fup, kind: c.kind, vector: c.vector });
                fup = fup.or(c.fup);
            }
            if let Some(ip) = fup {
                let to_base = std::mem::replace(&mut self.ip_base, fup_base);
                self.emit_ip(Packet::Fup, Some(ip));
                self.ip_base = to_base;
            }
        }
        if stop {
            self.trace_stop(was, None);
            return;
        }
        match (was, now) {
            (true, true) => {
                if cr3_changed && self.cfg.ctl.os() {
                    self.pip();
                }
                self.mode_exec_if_needed();
                self.tip(next);
            }
            (true, false) => {
                // ContextEn or FilterEn dropped: the destination is not traced.
                let ip = if context_en(&self.cfg, &self.ctx) { Some(next) } else { None };
                self.emit_ip(Packet::TipPgd, ip);
                self.packet_en = false;
            }
            (false, true) => {
                if cr3_changed && self.cfg.ctl.os() {
                    self.pip();
                }
                self.packet_en = true;
                self.pge(next);
            }
            (false, false) => {}
        }
        self.maybe_psb(next);
    }

    /// MOV to CR3 retired, next instruction at `nlip` (Table 33-50): PIP if tracing stays on and
    /// OS=1; TIP.PGD (suppressed) if ContextEn drops; PIP, MODE.Exec, TIP.PGE(NLIP) if it rises.
    pub fn mov_cr3(&mut self, nlip: u64, cr3: u64) {
        self.service_overflow();
        self.set_resume(nlip);
        let was = self.packet_en;
        self.ctx.cr3 = cr3;
        if !self.trigger_en() {
            return;
        }
        let now = self.compute_packet_en();
        match (was, now) {
            (true, true) => {
                if self.cfg.ctl.os() {
                    self.pip();
                }
            }
            (true, false) => {
                self.emit_ip(Packet::TipPgd, None);
                self.packet_en = false;
            }
            (false, true) => {
                if self.cfg.ctl.os() {
                    self.pip();
                }
                self.packet_en = true;
                self.pge(nlip);
            }
            (false, false) => {}
        }
        self.maybe_psb(nlip);
    }

    /// Straight-line code from the previous event reached `ip` without a branch (e.g. the end
    /// of a basic block that is not a COFI). Only the IP filter can change here.
    pub fn linear(&mut self, ip: u64) {
        self.service_overflow();
        self.set_resume(ip);
        if !self.trigger_en() {
            return;
        }
        let was = self.packet_en;
        let stop = self.eval_ip(ip);
        if stop {
            if was {
                self.emit_ip(Packet::Fup, Some(ip));
            }
            self.trace_stop(was, None);
            return;
        }
        let now = self.compute_packet_en();
        match (was, now) {
            (true, false) => {
                self.emit_ip(Packet::Fup, Some(ip));
                self.emit_ip(Packet::TipPgd, None);
                self.packet_en = false;
            }
            (false, true) => {
                self.packet_en = true;
                self.pge(ip);
            }
            _ => {}
        }
        self.maybe_psb(ip);
    }

    /// The base IP payloads are relative to from now on (the code the tracer is in): with
    /// CPUID.(EAX=14H,ECX=0):ECX[31] LIP = 0 the CS base, else 0. SDM Vol. 3C §33.3.1.1
    /// "Packet Decoding of RIP versus LIP": FUP, TIP, TIP.PGE and TIP.PGD carry an effective
    /// address (RIP, the offset from the current CS base) on processors that enumerate LIP = 0,
    /// the linear address (offset + CS base) with LIP = 1; the CS base is CS << 4 in real mode,
    /// the segment's base in protected mode; indistinguishable while it is 0 (e.g. 64-bit mode).
    /// The tracer is given linear addresses and subtracts this base from every IP payload and
    /// from the IPs compared with the IA32_RTIT_ADDRn ranges ("IP comparison logic, for IP
    /// filtering and TraceStop range calculation, is based on the same IP type as these IP
    /// packets", same section); RET compression and the resume IP stay linear (one base per
    /// segment: the same comparisons).
    pub fn set_ip_base(&mut self, base: u64) {
        self.ip_base = base;
        self.staged_ip_base = None;
    }

    /// The IP base after the next far transfer or event (the CS it loads): its FUP still
    /// binds to the source, its TIP / TIP.PGE / TIP.PGD to the destination.
    pub fn stage_ip_base(&mut self, base: u64) {
        self.staged_ip_base = Some(base);
    }

    // ---- Event Trace (IA32_RTIT_CTL[31] EventEn, CPUID.(14H,0):EBX[7]) ----

    /// RFLAGS.IF without packets (at enable, before the PSB+ that reports it).
    pub fn set_if(&mut self, if_flag: bool) {
        self.if_flag = if_flag;
        self.staged_if = None;
    }

    /// RFLAGS.IF at the instruction boundary the next report concerns: a transfer takes it as
    /// the IF after the transfer; otherwise `if_boundary` reports a change.
    pub fn stage_if(&mut self, if_flag: bool) {
        self.staged_if = Some(if_flag);
    }

    /// RFLAGS.IF in the handler of the next asynchronous event (an interrupt gate clears it):
    /// its MODE.Exec among the event's middle packets reports it.
    pub fn stage_event_if(&mut self, if_flag: bool) {
        self.event_if = Some(if_flag);
    }

    /// No transfer happened at this boundary (`ip`, the next instruction): if the staged IF
    /// differs, an instruction (STI, POPF, CLI) changed it, and with EventEn and PacketEn that
    /// is MODE.Exec with the new IF and FUP(`ip`) (libipt mode_exec-if.ptt: `sti` ->
    /// mode.exec(64bit, if), fup(NLIP)).
    pub fn if_boundary(&mut self, ip: u64) {
        let Some(i) = self.staged_if.take() else { return };
        if i == self.if_flag {
            return;
        }
        self.if_flag = i;
        if self.packet_en && self.cfg.ctl.event_en() {
            self.mode_exec_if_needed();
            self.emit_ip(Packet::Fup, Some(ip));
            self.maybe_psb(ip);
        }
    }

    /// The next `async_event` is an interrupt, exception or INT n with this vector: with
    /// EventEn, CFE(INTR, vector, IP = 0) before its FUP, after EVD(CR2) for a page fault.
    pub fn cfe_interrupt(&mut self, vector: u8, cr2: Option<u64>) {
        self.pending_cfe = Some(PendingCfe {
            kind: super::packet::CFE_INTR,
            vector,
            evd: cr2.map(|c| (super::packet::EVD_CR2, c)),
            fup: None,
        });
    }

    /// The next far transfer is the IRET at `ip`: with EventEn, CFE(IRET, IP = 1) and FUP(`ip`)
    /// before its middle packets and TIP.
    pub fn cfe_iret(&mut self, ip: u64) {
        self.pending_iret = Some(PendingCfe { kind: super::packet::CFE_IRET, vector: 0, evd: None, fup: Some(ip) });
    }

    /// IA32_RTIT_CTL.EventEn of the current configuration.
    pub fn event_en(&self) -> bool {
        self.cfg.ctl.event_en()
    }

    // ---- power event trace (IA32_RTIT_CTL[4] PwrEvtEn, CPUID.(14H,0):EBX[5]) ----

    /// HLT at `ip` retired and the core enters C1 until an interrupt wakes it. With PwrEvtEn and
    /// TriggerEn (SDM §33.2.3 "Power Event Tracing"; libipt mwait-pwre-exstop_ip-pwrx.ptt and
    /// mwait-pwre-exstop_ip-pwre-pwrx.ptt for the order): PWRE(C1, sub-state 0, HW = 0: entered by
    /// software), EXSTOP, and when PacketEn the EXSTOP carries IP = 1 and a FUP with the IP of the
    /// HLT follows (the decoder binds the event to that instruction). HLT enters C1 and nothing
    /// deeper in this model (no C-state policy: the core stays in C1 for the whole halt).
    pub fn halt(&mut self, ip: u64) {
        self.power_entry(ip, None, super::packet::CSTATE_C1, 0);
    }

    /// MWAIT at `ip` with hints EAX = `hints` and extensions ECX = `ext` entered the C-state the
    /// hints name (EAX[7:4] C-state - 1, EAX[3:0] sub-state): MWAIT, PWRE, EXSTOP (+ FUP), as
    /// `halt`.
    pub fn mwait(&mut self, ip: u64, hints: u32, ext: u32) {
        let state = ((hints >> 4) & 0xF) as u8;
        let sub = (hints & 0xF) as u8;
        self.power_entry(ip, Some((hints, ext)), state, sub);
    }

    fn power_entry(&mut self, ip: u64, mwait: Option<(u32, u32)>, state: u8, sub_state: u8) {
        self.service_overflow();
        if !(self.trigger_en() && self.cfg.ctl.pwr_evt_en()) {
            return;
        }
        if let Some((hints, ext)) = mwait {
            self.emit(Packet::Mwait { hints, ext });
        }
        self.emit(Packet::Pwre { state, sub_state, hw: false });
        self.emit(Packet::Exstop { ip: self.packet_en });
        if self.packet_en {
            self.emit_ip(Packet::Fup, Some(ip));
        }
        self.sleep_state = Some(state);
    }

    /// The core left the C-state of the last `halt`/`mwait` (back in C0) for `wake` (a
    /// [`super::packet::PWRX_WAKE_INTERRUPT`]-style reason): PWRX with that state as both the
    /// last and the deepest core C-state. Only after a PWRE (nothing if the entry was not traced);
    /// the event that woke the core (the interrupt's FUP and TIP) follows.
    pub fn wake(&mut self, wake: u8) {
        let Some(state) = self.sleep_state.take() else { return };
        if self.trigger_en() && self.cfg.ctl.pwr_evt_en() {
            self.emit(Packet::Pwrx { last: state, deepest: state, wake });
        }
    }

    /// The end of the trace (process exit): pending TNT bits are written out and the internal
    /// buffer drains completely; an overflow still in progress ends with OVF.
    pub fn finish(&mut self) {
        self.flush_tnt();
        self.drain_all_and_resolve();
    }
}

/// The steady state of a [`Tracer`] over a run of blocks with fixed successors (see
/// [`Tracer::steady_run`]): each block is what `direct_steady` does, with the counters kept
/// here until the run ends.
pub struct SteadyRun<'a> {
    t: &'a mut Tracer,
    /// The pending TNT results, kept here (in registers) while the run lasts.
    tnt: TntBuffer,
    resume_ip: u64,
    resumes: u64,
    tnt_packets: u64,
    compressed_rets: u64,
    /// Bytes until the PSB period is reached (> 0 while the run lasts).
    psb_room: u64,
}

/// Why `SteadyRun::system_blocks` stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemStop {
    /// Every record retired.
    End,
    /// The next record is not reached along a fixed successor or by a compressed RET, or its
    /// predecessor was left early: the general path takes it.
    General,
    /// The PSB period was reached with the last block that retired: end the run and call
    /// [`Tracer::psb_if_due`] with its address.
    Psb,
    /// The next record's time is not the tracer's: `SteadyRun::retired_at` takes it.
    Time,
}

impl SteadyRun<'_> {
    /// Blocks retired in this run so far.
    #[inline(always)]
    pub fn blocks(&self) -> u64 {
        self.resumes
    }

    /// The block whose last instruction is `last` retired with `next` as its successor: along
    /// `end`, its fixed successors at the addresses the block ran at, when the caller found that
    /// they explain `next` (`direct`), or else by a near RET that compresses
    /// (`compressed_ret`). Some(false): the PSB period was reached with this block (end the run
    /// and call [`Tracer::psb_if_due`] with `next`); None: neither applies, nothing changed (the
    /// general path explains the block).
    #[inline(always)]
    pub fn retired(&mut self, last: &ClassifiedInsn, end: Option<&crate::user_flow::DirectFlow>, next: u64) -> Option<bool> {
        match end {
            Some(end) => Some(self.direct(end, next)),
            None if last.kind == BranchKind::Return && !last.rep_string => self.compressed_ret(next),
            None => None,
        }
    }

    /// `retired` for a block that started at time `tsc` (issue 13: recorded blocks carry the
    /// clock as the vCPU sampled it): what `Tracer::set_tsc` and the general path do there. When
    /// the time moved within the CTC period MTCFreq selects, nothing but the time changes;
    /// when it entered a later period, the MTC `timing_packets` sends goes out before the
    /// block's own packets (SDM §33.4.2.11; the pending TNT results stay pending, as there).
    /// None, nothing changed, where `retired` declines the block or the general path would do
    /// more: a gap long enough for TSC + TMA, or an MTC that reaches the PSB period.
    #[inline(always)]
    pub fn retired_at(&mut self, last: &ClassifiedInsn, end: Option<&crate::user_flow::DirectFlow>, next: u64, tsc: u64) -> Option<bool> {
        if tsc != self.t.tsc {
            let explained = end.is_some()
                || (last.kind == BranchKind::Return && !last.rep_string && !self.t.cfg.ctl.dis_retc() && self.t.ret.would_compress(next));
            if !(explained && self.advance_time(tsc)) {
                return None;
            }
        }
        self.retired(last, end, next)
    }

    /// The tracer's time becomes `tsc`, with the MTC a new CTC period calls for (see
    /// `retired_at`); false, nothing changed, where that needs the general path.
    #[inline(never)]
    fn advance_time(&mut self, tsc: u64) -> bool {
        /// An MTC packet: its header byte and CTC[7:0].
        const MTC_BYTES: u64 = 2;
        let t = &mut *self.t;
        let ctl = t.cfg.ctl;
        // (CYC is off in the steady state: `Tracer::steady`.)
        if ctl.mtc_en() {
            let ctc = (tsc / ART_RATIO) >> ctl.mtc_freq();
            if t.last_mtc_ctc != Some(ctc) {
                let Some(last) = t.last_mtc_ctc else { return false };
                // A long gap goes out as TSC + TMA, and an MTC that fills the PSB period is
                // followed by PSB+ after the block's packets: both left to the general path.
                if (ctc.wrapping_sub(last) >= MTC_GAP_FOR_TSC && ctl.tsc_en()) || self.psb_room <= MTC_BYTES {
                    return false;
                }
                t.tsc = tsc;
                let psb_bytes = t.psb_bytes;
                t.emit_raw(Packet::Mtc { ctc: ctc as u8 });
                t.last_mtc_ctc = Some(ctc);
                self.psb_room -= t.psb_bytes - psb_bytes;
                return true;
            }
        }
        t.tsc = tsc;
        true
    }

    /// The block end `end` retired with `next` as its fixed successor (`end.explains(next)`).
    #[inline(always)]
    fn direct(&mut self, end: &crate::user_flow::DirectFlow, next: u64) -> bool {
        self.resume_ip = next;
        self.resumes += 1;
        let full = self.tnt.push_if(end.conditional, next != end.fall);
        if end.push != 0 {
            self.t.ret.push(end.push);
        }
        self.tnt_packet(full)
    }

    /// A near RET retired to `next`: with RET compression on and `next` the NLIP of the last
    /// CALL on the stack it is one taken TNT bit (§33.4.2.2), done here; None when it is not
    /// compressed (nothing changed: the general path sends its TIP).
    #[inline(always)]
    fn compressed_ret(&mut self, next: u64) -> Option<bool> {
        if self.t.cfg.ctl.dis_retc() || !self.t.ret.try_compress(next) {
            return None;
        }
        self.compressed_rets += 1;
        self.resume_ip = next;
        self.resumes += 1;
        let full = self.tnt.push(true);
        Some(self.tnt_packet(full))
    }

    /// User mode (issue 13): the recorded blocks of `blocks`, oldest first, for as long as each
    /// is reached from the one before along a fixed successor or by a RET that compresses
    /// (`prev`: the end of the block that ran before the first): what `retired` does for each,
    /// in one loop that keeps the run's state (pending TNT results, clock, counters) in
    /// registers and dispatches on nothing but the two successor compares. `clock` advances by
    /// the instruction count of each block that retired and `prev` becomes the last one's end.
    /// Returns how many retired, and whether the PSB period was reached with the last of them
    /// (end the run and call [`Tracer::psb_if_due`] with its address); without that, fewer than
    /// all means the next block is for the general path.
    #[inline(never)]
    pub fn user_blocks<B: ExecutedBlock>(&mut self, prev: &mut &'static BlockEnd, blocks: &[B], clock: &mut u64) -> (usize, bool) {
        let t = &mut *self.t;
        // IA32_RTIT_CTL[11] DisRETC cannot change during a run.
        let retc = !t.cfg.ctl.dis_retc();
        // Room for every short TNT the loop can complete: at most one per six results (one
        // result per block at most, fewer than six pending), and the run ends at the PSB room.
        // The loop then stores its bytes without a capacity check or a call, and keeps its state
        // in registers.
        let most = self.psb_room.min((blocks.len() as u64 + 5) / 6) as usize;
        t.out.reserve(most);
        let spare = &mut t.out.spare_capacity_mut()[..most];
        let (mut tnt, mut p, mut c) = (self.tnt, *prev, *clock);
        let (mut written, mut rets) = (0usize, 0u64);
        // Blocks retired so far: the loop ends at the first that does not (its predecessor
        // does not explain it), at the end of `blocks` or with the PSB period reached.
        let mut n = 0;
        while let Some(b) = blocks.get(n) {
            let pc = b.pc();
            let d = &p.direct;
            // A conditional branch: one TNT result, taken iff `pc` is not the NLIP; not
            // explained if it is not the target either. Other fixed successors: a single one
            // (`target` = `fall`), and a direct CALL's push. (One test of the class per block,
            // then only what that class needs.)
            let full = if d.conditional {
                let taken = pc != d.fall;
                if taken & (pc != d.target) {
                    break;
                }
                tnt.push_if_short(true, taken)
            } else if pc == d.target {
                if d.push != 0 {
                    t.ret.push(d.push);
                }
                None
            } else if p.compressible_ret & retc && t.ret.try_compress(pc) {
                rets += 1;
                tnt.push_if_short(true, true)
            } else {
                break;
            };
            n += 1;
            c += b.n_insns();
            p = b.end();
            if let Some(byte) = full {
                spare[written].write(byte);
                written += 1;
                // (`most` is the PSB room or less.)
                if written == most && written as u64 == self.psb_room {
                    break;
                }
            }
        }
        // SAFETY: the first `written` bytes of the spare capacity were initialized above.
        unsafe { self.loop_done(written, n.checked_sub(1).map(|last| blocks[last].pc()), n, tnt, rets) };
        (*prev, *clock) = (p, c);
        (n, self.psb_room == 0)
    }

    /// Full system (issue 13): the recorded blocks of `recs`, oldest first, for as long as each
    /// is reached from the one before along a fixed successor (fall-through, direct JMP or CALL,
    /// either way of a Jcc) or by a RET that compresses, at the tracer's current time: what
    /// `retired_at` does for each (with `SystemFlow::steady_records` as the caller), in one loop
    /// that keeps the pending TNT results and the previous block in registers, like
    /// `user_blocks`. `cur` is the block that ran before the first (its classification in the
    /// current mode and its delta: actual address minus address at translation); it becomes the
    /// last one that retired. `slot` is the mode slot the blocks are classified in
    /// (`RecordedBlock::block`). With `time_offset` each record's clock sample minus it is its
    /// time (`RecordedBlock::tsc`), and the loop stops before a block whose time is not the
    /// tracer's (`SystemStop::Time`: `retired_at` takes it); without, the time does not change.
    /// Returns how many retired and why the loop stopped.
    #[inline]
    pub fn system_blocks<'r, R: RecordedBlock>(
        &mut self,
        cur: &mut (&'r SysBlock, u64),
        recs: &'r [R],
        slot: usize,
        time_offset: Option<u64>,
    ) -> (usize, SystemStop) {
        match time_offset {
            Some(offset) => self.system_blocks_loop::<true, R>(cur, recs, slot, offset),
            None => self.system_blocks_loop::<false, R>(cur, recs, slot, 0),
        }
    }

    /// `system_blocks`, with (`PER_RECORD`) or without a time per record.
    #[inline(never)]
    fn system_blocks_loop<'r, const PER_RECORD: bool, R: RecordedBlock>(
        &mut self,
        cur: &mut (&'r SysBlock, u64),
        recs: &'r [R],
        slot: usize,
        offset: u64,
    ) -> (usize, SystemStop) {
        let t = &mut *self.t;
        // IA32_RTIT_CTL[11] DisRETC cannot change during a run.
        let retc = !t.cfg.ctl.dis_retc();
        // Room for every short TNT the loop can complete (see `user_blocks`): it stores its
        // bytes without a capacity check or a call.
        let most = self.psb_room.min((recs.len() as u64 + 5) / 6) as usize;
        t.out.reserve(most);
        let spare = &mut t.out.spare_capacity_mut()[..most];
        let now = t.tsc;
        let (mut tnt, (mut b, mut delta)) = (self.tnt, *cur);
        let (mut written, mut rets) = (0usize, 0u64);
        // The records not retired yet (the first is the next one).
        let mut rest = recs.iter();
        let stop = loop {
            let Some(r) = rest.as_slice().first() else { break SystemStop::End };
            // The previous block's last instruction started (QEMU did not leave it early).
            if r.last_started() != b.last.ip {
                break SystemStop::General;
            }
            if PER_RECORD && r.tsc().wrapping_sub(offset) != now {
                break SystemStop::Time;
            }
            let pc = r.pc();
            // The fixed successors are translation addresses: compare `pc` moved back by the
            // previous block's delta. A Jcc: one TNT result, taken iff not the NLIP; other
            // fixed successors: one address (`target` = `fall`), and a direct CALL's push.
            let at = pc.wrapping_sub(delta);
            let d = &b.direct;
            let full = if d.conditional {
                let taken = at != d.fall;
                if taken & (at != d.target) {
                    break SystemStop::General;
                }
                tnt.push_if_short(true, taken)
            } else if at == d.target {
                if d.push != 0 {
                    t.ret.push(d.push.wrapping_add(delta));
                }
                None
            } else if b.compressible_ret & retc && t.ret.try_compress(pc) {
                rets += 1;
                tnt.push_if_short(true, true)
            } else {
                break SystemStop::General;
            };
            rest.next();
            b = &**r.block(slot);
            delta = pc.wrapping_sub(r.translated());
            if let Some(byte) = full {
                spare[written].write(byte);
                written += 1;
                // (`most` is the PSB room or less.)
                if written == most && written as u64 == self.psb_room {
                    break SystemStop::Psb;
                }
            }
        };
        let n = recs.len() - rest.as_slice().len();
        // SAFETY: the first `written` bytes of the spare capacity were initialized above.
        unsafe { self.loop_done(written, n.checked_sub(1).map(|last| recs[last].pc()), n, tnt, rets) };
        *cur = (b, delta);
        (n, stop)
    }

    /// The end of a steady loop (`user_blocks`, `system_blocks_loop`): the `written` TNT bytes
    /// it stored are committed to the output, and the run takes the loop's state: `n` blocks
    /// retired, the last at `last_pc`, the pending TNT results `tnt`, `rets` compressed RETs.
    ///
    /// # Safety
    /// The loop initialized the first `written` bytes of the output's spare capacity.
    #[inline(always)]
    unsafe fn loop_done(&mut self, written: usize, last_pc: Option<u64>, n: usize, tnt: TntBuffer, rets: u64) {
        // SAFETY: the caller's contract.
        unsafe { self.t.out.set_len(self.t.out.len() + written) };
        if let Some(pc) = last_pc {
            self.resume_ip = pc;
        }
        self.resumes += n as u64;
        self.tnt = tnt;
        self.tnt_packets += written as u64;
        self.compressed_rets += rets;
        self.psb_room -= written as u64;
    }

    /// A full short TNT (`full`, from the accumulator) goes out; false once the PSB period is
    /// reached with it.
    #[inline(always)]
    fn tnt_packet(&mut self, full: Option<(u8, u8)>) -> bool {
        let Some((bits, count)) = full else { return true };
        super::encode::push_tnt_short(u64::from(bits), count, &mut self.t.out);
        self.tnt_packets += 1;
        self.psb_room -= 1;
        self.psb_room != 0
    }
}

impl Drop for SteadyRun<'_> {
    fn drop(&mut self) {
        let t = &mut *self.t;
        // Every result of the run went into the accumulator, and left it only in full packets.
        let tnt_bits = u64::from(SHORT_TNT_BITS) * self.tnt_packets + u64::from(self.tnt.pending()) - u64::from(t.tnt.pending());
        t.tnt = self.tnt;
        t.resume_ip = self.resume_ip;
        t.resume_seq = t.resume_seq.wrapping_add(self.resumes);
        t.stats.tnt_bits += tnt_bits;
        t.stats.compressed_rets += self.compressed_rets;
        t.stats.packets += self.tnt_packets;
        t.stats.bytes += self.tnt_packets;
        t.psb_bytes += self.tnt_packets;
    }
}

