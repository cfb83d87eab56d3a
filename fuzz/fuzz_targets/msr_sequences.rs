//! Arbitrary sequences of WRMSR/RDMSR of the IA32_RTIT_* MSRs, retirement events and context
//! changes, driving RtitMsrs + Tracer + OutputUnit exactly as plugin/src/system.rs does
//! (`wrmsr`, `drain`, `sync_status`, RDMSR via `apply_pending`), with guest memory a
//! SparseMemory of a few RAM ranges and holes.
//!
//! Invariants checked after every operation:
//! - no panic (the core's `debug_assert`s are on in fuzz builds);
//! - output placement: every store SparseMemory records during an output-unit call lies inside a
//!   region the guest configured, as computed by the independent `RefOutput` (single range
//!   [base, base+mask+1), or a ToPA region named by a table entry read at the time); guest RAM of
//!   the core and of the reference are byte-identical; `written`, STOP, error and (multi-entry
//!   ToPA) PMI agree; OUTPUT_BASE / OUTPUT_MASK_PTRS read back the reference pointers;
//! - MSR rules: a WRMSR that #GPs changes no MSR; #GP is predicted by hand for the SDM's plain
//!   rules (unimplemented MSR, reserved CTL/STATUS/CR3_MATCH/OUTPUT_BASE bits, non-canonical
//!   ADDRn, any write other than to CTL while TraceEn = 1, a CTL write that keeps TraceEn = 1 and
//!   changes a field) and acceptance for the plain legal writes (CTL <- 0, rewriting CTL's value,
//!   OUTPUT_MASK_PTRS with TraceEn = 0); accepted writes read back as SDM Table 33-6..33-9 say;
//!   reserved bits read back 0, MASK_PTRS[6:0] read 1, TriggerEn reads 0 with TraceEn = 0;
//! - byte accounting: every byte the tracer generated (TracerStats::bytes) was handed to the
//!   output unit or dropped by the plugin's sequence; nothing is generated while TriggerEn = 0
//!   (TraceEn = 0, Stopped, or an output STOP/error), except the one TNT flush of
//!   `stop_without_packets`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pttrace_core::guest_mem::{GuestMemory, SparseMemory};
use pttrace_core::insn_class::{BranchKind, FarKind};
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::msr::{
    ctl_reserved_mask, Fault, OutputMaskPtrs, RtitMsrs, WriteEffect, IA32_PERF_GLOBAL_STATUS, IA32_RTIT_CR3_MATCH,
    IA32_RTIT_CTL, IA32_RTIT_OUTPUT_BASE, IA32_RTIT_OUTPUT_MASK_PTRS, IA32_RTIT_STATUS, PERF_GLOBAL_STATUS_TRACE_TOPA_PMI,
};
use pttrace_core::pt::output::{OutputState, OutputUnit};
use pttrace_core::pt::packet::ExecMode;
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};
use pttrace_fuzz::*;

/// The MSRs the harness reads and writes (index by selector byte).
const MSRS: [u32; 15] = [
    0x560, 0x561, 0x570, 0x571, 0x572, 0x580, 0x581, 0x582, 0x583, 0x584, 0x585, 0x586, 0x587, 0x38E, 0x390,
];
const RTIT_MSRS: [u32; 13] = [0x560, 0x561, 0x570, 0x571, 0x572, 0x580, 0x581, 0x582, 0x583, 0x584, 0x585, 0x586, 0x587];

/// IA32_RTIT_CTL bits reserved on every profile (SDM Table 33-6), stated independently of
/// `msr::CTL_ALWAYS_RESERVED`: [18], [23], [30:28], [54:48], [63:57].
const CTL_ALWAYS_RESERVED: u64 = (1 << 18) | (1 << 23) | (0b111 << 28) | (0x7F << 48) | (0x7F << 57);
/// IA32_RTIT_STATUS bits reserved on every profile (Table 33-7): [3], [31:8], [63:49].
const STATUS_RESERVED: u64 = (1 << 3) | (0xFF_FFFF << 8) | (0x7FFF << 49);

struct Machine {
    caps: PtCaps,
    msrs: RtitMsrs,
    tracer: Tracer,
    output: OutputUnit,
    output_active: bool,
    mem: SparseMemory,
    ref_mem: SparseMemory,
    reference: RefOutput,
    /// The CPU's context (CPL, CR3, mode) as the plugin would read it from registers.
    ctx: Context,
    tsc: u64,
    // Byte accounting.
    taken: u64,
    dropped_inactive: u64,
    /// Output STOP / error seen since the last enable; the tracer may flush one TNT after it.
    dead: bool,
    flushed_after_dead: bool,
    /// Counts for `PTTRACE_FUZZ_VERBOSE=1` (what a seed exercises).
    summary: Summary,
}

#[derive(Debug, Default)]
struct Summary {
    wrmsr: u32,
    gp: u32,
    enables: u32,
    start_errors: u32,
    written: u64,
    stops: u32,
    errors: u32,
    pmis: u32,
}

impl Machine {
    fn new(caps: PtCaps) -> Self {
        let mut mem = new_memory();
        let ref_mem = mem.clone();
        mem.writes.clear();
        Machine {
            caps,
            msrs: RtitMsrs::default(),
            tracer: Tracer::new(
                TraceConfig { num_ranges: caps.num_addr_ranges as usize, ..TraceConfig::default() },
                Context::KERNEL64,
            ),
            output: OutputUnit::new(caps),
            output_active: false,
            mem,
            ref_mem,
            reference: RefOutput::new(caps),
            ctx: Context::KERNEL64,
            tsc: 0,
            taken: 0,
            dropped_inactive: 0,
            dead: false,
            flushed_after_dead: false,
            summary: Summary::default(),
        }
    }

    fn trace_config(&self) -> TraceConfig {
        TraceConfig {
            ctl: self.msrs.ctl,
            cr3_match: self.msrs.cr3_match,
            addr: self.msrs.addr,
            num_ranges: self.caps.num_addr_ranges as usize,
            cbr: TraceConfig::default().cbr,
        }
    }

    /// The guest writes its own memory (ToPA tables, anything): both copies.
    fn guest_write(&mut self, addr: u64, v: u64) {
        let a = self.mem.write_u64(addr, v);
        let b = self.ref_mem.write_u64(addr, v);
        assert_eq!(a.is_ok(), b.is_ok());
        self.mem.writes.clear();
    }

    /// plugin `drain`: hand the generated bytes to the output unit; STOP / error feed back.
    fn drain(&mut self) {
        if self.tracer.output().is_empty() {
            return;
        }
        let bytes = self.tracer.take_output();
        self.taken += bytes.len() as u64;
        if self.dead {
            // After STOP / error only the TNT flush of stop_without_packets may follow.
            assert!(
                !self.flushed_after_dead && bytes.len() <= 1,
                "{} bytes generated after the output stopped (TriggerEn = 0)",
                bytes.len()
            );
            self.flushed_after_dead = true;
        }
        if !self.output_active {
            self.dropped_inactive += bytes.len() as u64;
            return;
        }
        let running = self.output.state() == OutputState::Running;
        assert_eq!(running, self.reference.state == RefState::Running, "output state vs reference");
        let before = self.mem.writes.len();
        let outcome = self.output.write(&mut self.mem, &bytes);
        let r = self.reference.write(&mut self.ref_mem, &bytes);
        assert_writes_inside(&self.mem.writes[before..], &r.targets, "drain");
        self.mem.writes.clear();
        assert_same_ram_at(&mut self.mem, &mut self.ref_mem, &r.targets, "drain");
        assert_eq!(outcome.written, r.consumed, "bytes consumed vs reference");
        assert_eq!(outcome.stopped, r.stopped, "STOP vs reference");
        assert_eq!(outcome.error.is_some(), r.error, "error vs reference: {:?}", outcome.error);
        if self.caps.topa_multi || !self.msrs.ctl.topa() {
            assert_eq!(outcome.pmi, r.pmi, "ToPA PMI vs reference");
        }
        assert!(outcome.written <= bytes.len());
        if !running {
            assert_eq!(outcome.written, 0, "a stopped output unit consumed bytes");
        }
        self.check_pointers();
        self.summary.written += outcome.written as u64;
        self.summary.stops += u32::from(outcome.stopped);
        self.summary.errors += u32::from(outcome.error.is_some());
        self.summary.pmis += u32::from(outcome.pmi);
        if outcome.pmi {
            self.msrs.set_topa_pmi();
        }
        if outcome.stopped {
            self.msrs.status.set_stopped(true);
            self.tracer.stop_without_packets();
            self.dead = true;
        }
        if outcome.error.is_some() {
            self.msrs.status.set_error(true);
            self.output_active = false;
            self.tracer.stop_without_packets();
            self.dead = true;
        }
    }

    fn check_pointers(&mut self) {
        assert_eq!(self.output.output_base(), self.reference.output_base(), "OUTPUT_BASE vs reference");
        assert_eq!(self.output.output_mask_ptrs(), self.reference.output_mask_ptrs(), "OUTPUT_MASK_PTRS vs reference");
    }

    /// plugin `sync_status`.
    fn sync_status(&mut self) {
        if self.tracer.trace_en() {
            let (filter_en, context_en, trigger_en) = self.tracer.status_bits();
            self.msrs.status.set_filter_en(filter_en);
            self.msrs.status.set_context_en(context_en);
            self.msrs.status.set_trigger_en(trigger_en);
        } else {
            self.msrs.status.set_trigger_en(false);
        }
        if self.tracer.trace_en() && self.tracer.trace_stop_hit() {
            self.msrs.status.set_stopped(true);
        }
        if self.tracer.trace_en() && self.caps.psb_cyc {
            self.msrs.status.set_packet_byte_cnt(self.tracer.packet_byte_count().min(u64::from(u32::MAX)) as u32);
        }
        self.msrs.output_base = self.output.output_base();
        self.msrs.output_mask_ptrs = OutputMaskPtrs::new(self.output.output_mask_ptrs());
    }

    /// plugin RDMSR (apply_pending): sync_status, then read.
    fn rdmsr(&mut self, index: u32) -> Result<u64, Fault> {
        self.sync_status();
        self.msrs.read(index, &self.caps)
    }

    fn read_all(&mut self) -> Vec<Result<u64, Fault>> {
        MSRS.iter().map(|&i| self.rdmsr(i)).collect()
    }

    /// plugin `wrmsr` for an owned MSR, with the SDM checks around it.
    fn wrmsr(&mut self, index: u32, value: u64, ip: u64, nlip: u64) {
        self.tracer.set_tsc(self.tsc);
        let before = self.read_all();
        let old_ctl = self.msrs.ctl.0;
        let trace_en = old_ctl & 1 != 0;
        let predicted = predict_gp(&self.caps, index, value, old_ctl);
        self.sync_status();
        let r = self.msrs.write(index, value, &self.caps);
        self.summary.wrmsr += 1;
        self.summary.gp += u32::from(r.is_err());
        match predicted {
            Some(true) => assert_eq!(r, Err(Fault::Gp), "WRMSR {index:#x} <- {value:#x} (CTL {old_ctl:#x}) must #GP"),
            Some(false) => assert!(r.is_ok(), "WRMSR {index:#x} <- {value:#x} (CTL {old_ctl:#x}) must not #GP"),
            None => {}
        }
        match r {
            Err(Fault::Gp) => {
                let after = self.read_all();
                assert_eq!(before, after, "WRMSR {index:#x} <- {value:#x} raised #GP but changed an MSR");
                return;
            }
            Ok(WriteEffect::TraceEnabled) => {
                assert!(!trace_en && value & 1 != 0);
                self.tracer.set_context(self.ctx);
                self.tracer.reconfigure(self.trace_config());
                let restored = if self.caps.psb_cyc { self.msrs.status.packet_byte_cnt() } else { 0 };
                self.tracer.set_packet_byte_count(u64::from(restored));
                let ctl = self.msrs.ctl;
                let blocked = self.msrs.status.stopped() || self.msrs.status.error();
                self.dead = false;
                self.flushed_after_dead = false;
                if blocked {
                    self.output_active = false;
                } else {
                    let base = self.msrs.output_base;
                    let ptrs = self.msrs.output_mask_ptrs.value();
                    let before_w = self.mem.writes.len();
                    let ok = self.output.start(ctl.topa(), base, ptrs, &mut self.mem).is_ok();
                    assert_eq!(self.mem.writes.len(), before_w, "output start stored bytes");
                    let ref_ok = self.reference.start(ctl.topa(), base, ptrs, &mut self.ref_mem);
                    assert_eq!(ok, ref_ok, "output start vs reference (CTL {:#x}, base {base:#x}, ptrs {ptrs:#x})", ctl.0);
                    self.check_pointers();
                    self.output_active = ok;
                    self.summary.enables += 1;
                    self.summary.start_errors += u32::from(!ok);
                    if !ok {
                        self.msrs.status.set_error(true);
                    }
                }
                self.tracer.write_ctl(ip, nlip, ctl);
                if !self.output_active {
                    self.tracer.stop_without_packets();
                    let gone = self.tracer.take_output();
                    self.taken += gone.len() as u64;
                    self.dropped_inactive += gone.len() as u64;
                }
                self.drain();
            }
            Ok(WriteEffect::TraceDisabled) => {
                assert!(trace_en && value & 1 == 0);
                self.tracer.write_ctl(ip, nlip, self.msrs.ctl);
                self.drain();
                self.output.stop();
                self.reference.stop();
                self.output_active = false;
                if self.caps.psb_cyc {
                    let count = self.tracer.packet_byte_count().min(u64::from(u32::MAX)) as u32;
                    self.msrs.status.set_packet_byte_cnt(count);
                }
                self.sync_status();
                self.check_pointers();
            }
            Ok(WriteEffect::Plain) => {
                match index {
                    IA32_RTIT_OUTPUT_BASE => {
                        self.output.set_output_base(self.msrs.output_base);
                        self.reference.set_msrs(Some(self.msrs.output_base), None);
                    }
                    IA32_RTIT_OUTPUT_MASK_PTRS => {
                        self.output.set_output_mask_ptrs(self.msrs.output_mask_ptrs.value());
                        self.reference.set_msrs(None, Some(self.msrs.output_mask_ptrs.value()));
                    }
                    _ => {}
                }
                if !self.tracer.trace_en() {
                    self.tracer.reconfigure(self.trace_config());
                }
            }
        }
        // Read-back of an accepted write (SDM Tables 33-6..33-9).
        let back = self.rdmsr(index);
        match index {
            IA32_RTIT_CTL => assert_eq!(back, Ok(value), "CTL read-back"),
            IA32_RTIT_OUTPUT_BASE => assert_eq!(back, Ok(value), "OUTPUT_BASE read-back"),
            IA32_RTIT_OUTPUT_MASK_PTRS => assert_eq!(back, Ok(value | 0x7F), "OUTPUT_MASK_PTRS read-back"),
            IA32_RTIT_CR3_MATCH => assert_eq!(back, Ok(value), "CR3_MATCH read-back"),
            IA32_RTIT_STATUS => {
                let v = back.expect("STATUS readable");
                // Error[4] and Stopped[5] are written as given; FilterEn/ContextEn/TriggerEn are
                // ignored on write, and TriggerEn reads 0 with TraceEn = 0.
                assert_eq!(v & 0x30, value & 0x30, "STATUS Error/Stopped read-back");
                assert_eq!(v & 0x4, 0, "STATUS.TriggerEn with TraceEn = 0");
                if self.caps.psb_cyc {
                    assert_eq!(v & (0x1_FFFF << 32), value & (0x1_FFFF << 32), "PacketByteCnt read-back");
                }
            }
            0x580..=0x587 => assert_eq!(back, Ok(value), "ADDRn read-back"),
            _ => {}
        }
    }

    /// Invariants that hold between any two operations.
    fn check_always(&mut self) {
        let ctl = self.rdmsr(IA32_RTIT_CTL).expect("CTL always exists when PT is enumerated");
        assert_eq!(ctl & CTL_ALWAYS_RESERVED, 0, "CTL reserved bits read back 1");
        assert_eq!(ctl & ctl_reserved_mask(&self.caps), 0, "CTL bits of absent capabilities read back 1");
        assert_eq!(ctl & 1 != 0, self.tracer.trace_en(), "CTL.TraceEn vs tracer");
        let status = self.rdmsr(IA32_RTIT_STATUS).expect("STATUS exists");
        assert_eq!(status & STATUS_RESERVED, 0, "STATUS reserved bits read back 1: {status:#x}");
        if ctl & 1 == 0 {
            assert_eq!(status & 0x4, 0, "TriggerEn = 1 with TraceEn = 0");
        }
        if !self.caps.psb_cyc {
            assert_eq!(status >> 32, 0, "PacketByteCnt without the PSB/CYC capability");
        }
        if let Ok(p) = self.rdmsr(IA32_RTIT_OUTPUT_MASK_PTRS) {
            assert_eq!(p & 0x7F, 0x7F, "OUTPUT_MASK_PTRS[6:0] must read 1");
        }
        if let Ok(b) = self.rdmsr(IA32_RTIT_OUTPUT_BASE) {
            assert_eq!(b & 0x7F, 0, "OUTPUT_BASE[6:0] must read 0");
            assert_eq!(b & self.caps.phys_addr_reserved_mask(), 0, "OUTPUT_BASE beyond MAXPHYADDR");
        }
        if let Ok(c) = self.rdmsr(IA32_RTIT_CR3_MATCH) {
            assert_eq!(c & 0x1F, 0, "CR3_MATCH[4:0] must read 0");
        }
        for i in 0x580..=0x587u32 {
            if let Ok(a) = self.rdmsr(i) {
                assert_eq!((((a << 16) as i64) >> 16) as u64, a, "ADDRn not canonical");
            }
        }
        let g = self.rdmsr(IA32_PERF_GLOBAL_STATUS).expect("GLOBAL_STATUS");
        assert_eq!(g & !PERF_GLOBAL_STATUS_TRACE_TOPA_PMI, 0);
        // Byte accounting: generated = handed out + pending.
        let stats = self.tracer.stats();
        assert_eq!(stats.bytes, self.taken + self.tracer.output().len() as u64, "tracer byte count");
    }

    /// A retirement event: the plugin drains right after it. With TriggerEn = 0 before it, the
    /// event must generate no byte.
    fn event(&mut self, f: impl FnOnce(&mut Tracer)) {
        self.tracer.set_tsc(self.tsc);
        let quiet = !self.tracer.trace_en() || self.tracer.stopped();
        let before = self.tracer.stats().bytes;
        f(&mut self.tracer);
        if quiet {
            assert_eq!(self.tracer.stats().bytes, before, "packets generated with TriggerEn = 0");
        }
        self.drain();
    }
}

fn is_canonical(v: u64) -> bool {
    (((v << 16) as i64) >> 16) as u64 == v
}

/// The #GP outcome the SDM states plainly for WRMSR `index` <- `value` with CTL = `ctl`:
/// Some(true) must #GP, Some(false) must not, None = not predicted here.
fn predict_gp(caps: &PtCaps, index: u32, value: u64, ctl: u64) -> Option<bool> {
    let trace_en = ctl & 1 != 0;
    let exists = match index {
        0x570 | 0x571 => Some(true),
        0x560 | 0x561 => Some(caps.topa || caps.single_range),
        0x572 => Some(caps.cr3_filter),
        0x580..=0x587 => {
            let n = u8::try_from((index - 0x580) / 2).unwrap();
            Some(caps.ip_filter && n < caps.num_addr_ranges.min(4))
        }
        _ => None,
    };
    match exists {
        Some(false) => return Some(true),
        None => return None,
        Some(true) => {}
    }
    if index == IA32_RTIT_CTL {
        if value & CTL_ALWAYS_RESERVED != 0 {
            return Some(true);
        }
        if trace_en && value & 1 != 0 && value != ctl {
            return Some(true);
        }
        if value == 0 || value == ctl {
            return Some(false);
        }
        return None;
    }
    if trace_en {
        return Some(true);
    }
    match index {
        IA32_RTIT_STATUS if value & STATUS_RESERVED != 0 => Some(true),
        IA32_RTIT_STATUS if value & !0x37 == 0 => Some(false),
        IA32_RTIT_CR3_MATCH => Some(value & 0x1F != 0),
        IA32_RTIT_OUTPUT_BASE => Some(value & 0x7F != 0 || value & caps.phys_addr_reserved_mask() != 0),
        IA32_RTIT_OUTPUT_MASK_PTRS => Some(false),
        0x580..=0x587 => Some(!is_canonical(value)),
        _ => None,
    }
}

/// An instruction pointer from a selector: code areas the ranges and filters are likely to hit.
fn ip_sel(m: &Machine, sel: u8, off: u16) -> u64 {
    let bases = [
        0x40_1000,
        0x7fff_f7a0_0000,
        0xffff_ffff_8100_0000,
        m.msrs.addr[0].a,
        m.msrs.addr[0].b,
        m.msrs.addr[1].a,
        m.msrs.addr[1].b,
        m.msrs.addr[2].a,
    ];
    bases[usize::from(sel & 7)].wrapping_add(u64::from(off)).wrapping_sub(u64::from(sel >> 3 & 1) * 0x8000)
}

fn mode_sel(b: u8) -> ExecMode {
    match b % 3 {
        0 => ExecMode::Bit64,
        1 => ExecMode::Bit32,
        _ => ExecMode::Bit16,
    }
}

/// CR3 values. The harness keeps CR3 below 2^52 by default: a CR3 with bits 63:52 set (LAM's
/// CR3[62:61]) trips the encoder's debug assertion for PIP, a known finding
/// (fuzz/artifacts-found/README.md) that would otherwise stop every run. With
/// PTTRACE_FUZZ_RAW_CR3=1 the 16-bit field becomes CR3[63:48] instead, to reproduce it.
fn cr3_sel(v: u16) -> u64 {
    static RAW: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *RAW.get_or_init(|| std::env::var_os("PTTRACE_FUZZ_RAW_CR3").is_some()) {
        (u64::from(v) << 48) | 0x1000
    } else {
        (u64::from(v) << 12) & ((1u64 << 52) - 1)
    }
}

/// A CTL value likely to be accepted: random bits within the profile's allowed set, timing
/// encodings taken from the profile's bitmaps.
fn ctl_value(caps: &PtCaps, raw: u64, enc: u8) -> u64 {
    let mut v = raw & !ctl_reserved_mask(caps);
    let pick = |bitmap: u16, want: u8| -> u64 {
        (0..16u8).map(|i| want.wrapping_add(i) & 0xF).find(|&e| bitmap & (1 << e) != 0).map_or(0, u64::from)
    };
    if caps.mtc {
        v = (v & !(0xF << 14)) | (pick(caps.mtc_period_bitmap, enc) << 14);
    }
    if caps.psb_cyc {
        v = (v & !(0xF << 19)) | (pick(caps.cyc_thresh_bitmap, enc >> 4) << 19);
        v = (v & !(0xF << 24)) | (pick(caps.psb_freq_bitmap, enc >> 2) << 24);
    }
    // ADDRn_CFG: 0..=2 only.
    for n in 0..4 {
        let f = (v >> (32 + 4 * n)) & 0xF;
        if f > 2 {
            v &= !(0xF << (32 + 4 * n));
            v |= (f % 3) << (32 + 4 * n);
        }
    }
    if !caps.single_range && caps.topa {
        v |= 1 << 8;
    }
    // TraceEn and BranchEn on most of the time.
    v | 1 | (1 << 13)
}

fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let Some(caps_sel) = inp.u8() else { return };
    let caps = caps_for(caps_sel);
    let mut m = Machine::new(caps);
    let mut ip = 0x40_1000u64;
    let mut steps = 0;
    while let Some(op) = inp.u8() {
        steps += 1;
        if steps > 4096 {
            break;
        }
        let ok = (|| -> Option<()> {
            match op % 16 {
                // Raw WRMSR.
                0 => {
                    let idx = MSRS[usize::from(inp.u8()?) % MSRS.len()];
                    let value = inp.u64()?;
                    m.wrmsr(idx, value, ip, ip.wrapping_add(2));
                }
                // WRMSR IA32_RTIT_CTL with a value likely to be accepted.
                1 => {
                    let raw = inp.u64()?;
                    let enc = inp.u8()?;
                    let mut value = ctl_value(&caps, raw, enc);
                    if op & 0x10 != 0 {
                        value &= !1; // disable
                    }
                    m.wrmsr(IA32_RTIT_CTL, value, ip, ip.wrapping_add(2));
                }
                // WRMSR OUTPUT_BASE from an address selector.
                2 => {
                    let a = addr_sel(inp.u8()?, inp.u16()?);
                    m.wrmsr(IA32_RTIT_OUTPUT_BASE, a & !0x7F, ip, ip.wrapping_add(2));
                }
                // WRMSR OUTPUT_MASK_PTRS: ToPA (index, offset) or single range (2^k - 1, offset).
                3 => {
                    let k = inp.u8()?;
                    let off = u64::from(inp.u32()?);
                    let low = if op & 0x10 != 0 {
                        u64::from(k) << 7
                    } else {
                        (1u64 << (7 + u32::from(k % 26))) - 1
                    };
                    m.wrmsr(IA32_RTIT_OUTPUT_MASK_PTRS, low | (off << 32), ip, ip.wrapping_add(2));
                }
                // RDMSR of any index, plus the always-invariants.
                4 => {
                    let idx = RTIT_MSRS[usize::from(inp.u8()?) % RTIT_MSRS.len()];
                    let _ = m.rdmsr(idx);
                }
                // Guest writes a ToPA entry: table, index, region base, size, flags.
                5 => {
                    let table = addr_sel(inp.u8()?, inp.u16()?) & !0xFFF;
                    let index = u64::from(inp.u8()?);
                    let base = addr_sel(inp.u8()?, inp.u16()?) & !0xFFF;
                    let size_flags = inp.u8()?;
                    let mut flags = u64::from(size_flags >> 4) << 6;
                    flags |= [0, TOPA_END, TOPA_INT, TOPA_STOP, TOPA_INT | TOPA_STOP, 0, 0, 1 << 3][usize::from(size_flags & 7)];
                    m.guest_write(table + 8 * index, base | flags);
                }
                // Guest writes raw memory.
                6 => {
                    let a = addr_sel(inp.u8()?, inp.u16()?);
                    let v = inp.u64()?;
                    m.guest_write(a, v);
                }
                // Near branch / COFI retired at ip, continuing at next.
                7 | 8 => {
                    let k = inp.u8()?;
                    let len = u64::from(k >> 4) + 1;
                    let nlip = ip.wrapping_add(len);
                    let target = ip_sel(&m, inp.u8()?, inp.u16()?);
                    let (kind, next) = match k % 9 {
                        0 => (BranchKind::None, nlip),
                        1 => (BranchKind::Conditional { target }, if op & 0x10 != 0 { target } else { nlip }),
                        2 => (BranchKind::DirectJump { target }, target),
                        3 => (BranchKind::DirectCall { target }, target),
                        4 => (BranchKind::IndirectJump, target),
                        5 => (BranchKind::IndirectCall, target),
                        6 => (BranchKind::Return, if op & 0x10 != 0 { target } else { nlip }),
                        7 => (BranchKind::SoftwareInterrupt, target),
                        _ => (BranchKind::AlwaysFaults, target),
                    };
                    let at = ip;
                    m.event(|t| t.branch(at, nlip, kind, next));
                    ip = next;
                }
                // Far transfer with a context change.
                9 => {
                    let b = inp.u8()?;
                    let cr3 = cr3_sel(inp.u16()?);
                    let target = ip_sel(&m, inp.u8()?, inp.u16()?);
                    let to = Context { cpl: b & 3, cr3, mode: mode_sel(b >> 2) };
                    let kind = [FarKind::Syscall, FarKind::Sysret, FarKind::Iret, FarKind::FarJmp][usize::from(b >> 4 & 3)];
                    m.ctx = to;
                    m.event(|t| t.far_transfer(kind, target, to));
                    ip = target;
                }
                // Interrupt / exception / INT n.
                10 => {
                    let b = inp.u8()?;
                    let handler = ip_sel(&m, inp.u8()?, inp.u16()?);
                    let why = match b % 3 {
                        0 => AsyncKind::Interrupt { resume_ip: ip },
                        1 => AsyncKind::Fault { ip },
                        _ => AsyncKind::SoftwareInterrupt { ip },
                    };
                    let to = Context { cpl: 0, ..m.ctx };
                    m.ctx = to;
                    m.event(|t| t.async_event(why, handler, to));
                    ip = handler;
                }
                // MOV CR3.
                11 => {
                    let cr3 = cr3_sel(inp.u16()?);
                    m.ctx.cr3 = cr3;
                    let nlip = ip.wrapping_add(3);
                    m.event(|t| t.mov_cr3(nlip, cr3));
                    ip = nlip;
                }
                // Straight-line code reaching a new IP.
                12 => {
                    ip = ip_sel(&m, inp.u8()?, inp.u16()?);
                    let at = ip;
                    m.event(|t| t.linear(at));
                }
                // Time passes.
                13 => {
                    m.tsc = m.tsc.wrapping_add(u64::from(inp.u32()?));
                }
                // Context change while tracing is off (plugin reads it at enable).
                14 => {
                    let b = inp.u8()?;
                    m.ctx = Context { cpl: b & 3, cr3: cr3_sel(inp.u16()?), mode: mode_sel(b >> 2) };
                }
                // WRMSR PERF_GLOBAL_STATUS_RESET / _SET bit 55, or STATUS <- small value.
                _ => {
                    let b = inp.u8()?;
                    match b % 3 {
                        0 => m.wrmsr(0x390, PERF_GLOBAL_STATUS_TRACE_TOPA_PMI, ip, ip.wrapping_add(2)),
                        1 => m.wrmsr(0x391, PERF_GLOBAL_STATUS_TRACE_TOPA_PMI, ip, ip.wrapping_add(2)),
                        _ => m.wrmsr(IA32_RTIT_STATUS, u64::from(b >> 2) & 0x30, ip, ip.wrapping_add(2)),
                    }
                }
            }
            Some(())
        })();
        if ok.is_none() {
            break;
        }
        m.check_always();
    }
    // Process exit: pending TNT bits go out.
    m.event(|t| t.finish());
    m.check_always();
    assert!(ram_image(&mut m.mem) == ram_image(&mut m.ref_mem), "guest RAM differs from the reference");
    if std::env::var_os("PTTRACE_FUZZ_VERBOSE").is_some() {
        eprintln!("caps {caps_sel}: {:?}, tracer {:?}", m.summary, m.tracer.stats());
    }
}

fuzz_target!(|data: &[u8]| run(data));
