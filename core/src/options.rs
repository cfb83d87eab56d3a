//! Plugin options, named after perf's intel_pt config terms where one applies
//! (tools/perf/Documentation/perf-intel-pt.txt): `branch`, `noretcomp`, `psb_period`, `tsc`,
//! `mtc`, `mtc_period`, `cyc`, `cyc_thresh`, plus `out`, `filter`, `stop` and `truth`.
//! `trace=pt|rtit` picks Intel PT or Atom RTIT (seed 002); with `trace=rtit` the same terms map
//! onto RTIT_CTL (`noretcomp` -> !Cmprs_Ret, `psb_period` -> RTIT_PKT_CNT[Pkt_Mask], `mtc` ->
//! MTC_En, `mtc_period` -> MTC_Range, `cyc` -> Cycle_Acc, `filter`/`stop` -> RANGE0/1 with
//! RTIT_EVENTS), plus `less_pkts` (RTIT_CTL[Less_Pkts]).
//!
//! Every option is checked against what the capability profile supports; a bad value is an
//! error naming the option and the accepted values, never a panic.

use crate::pt::rtit_ctl::{AddrCfg, AddrRange, RtitCtl};
use crate::pt::tracer::TraceConfig;
use crate::rtit::msr::LIP_ADDR_MASK;
use crate::rtit::setup::{RangeUse, RtitConfig};
use std::path::PathBuf;

/// Which trace hardware the user-mode plugin emulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// Intel Processor Trace: DIR/thread-N.pt.
    Pt,
    /// Atom (Silvermont/Airmont) Real Time Instruction Trace: DIR/thread-N.rtit.
    Rtit,
    /// Plugin loaded, nothing traced (no per-block instrumentation): the cost baseline of
    /// `make bench`.
    Off,
}

impl TraceKind {
    pub fn name(self) -> &'static str {
        match self {
            TraceKind::Pt => "pt",
            TraceKind::Rtit => "rtit",
            TraceKind::Off => "off",
        }
    }
}

/// PSBFreq encodings the default (Skylake-class) profile accepts: CPUID.(14H,1):EBX[31:16] = 0x003F.
const PSB_FREQ_BITMAP: u16 = 0x003F;
/// MTCFreq encodings of the default profile: CPUID.(14H,1):EAX[31:16] = 0x0249.
const MTC_PERIOD_BITMAP: u16 = 0x0249;
/// CycThresh encodings of the default profile: CPUID.(14H,1):EBX[15:0] = 0x3FFF.
const CYC_THRESH_BITMAP: u16 = 0x3FFF;
/// Address ranges the default profile implements: CPUID.(14H,1):EAX[2:0] = 2.
const NUM_ADDR_RANGES: usize = 2;

pub const USAGE: &str = "pttrace options (comma separated, key=value):
  out=DIR           output directory (created if missing; default ./pttrace-out)
  trace=pt|rtit|off Intel PT (DIR/thread-N.pt) or Atom RTIT (DIR/thread-N.rtit) (default pt);
                    off: plugin loaded, nothing instrumented or traced
  branch=0|1        COFI packets, IA32_RTIT_CTL.BranchEn (default 1; rtit: always 1)
  noretcomp=0|1     disable RET compression, IA32_RTIT_CTL.DisRETC (default 0; rtit: !RTIT_CTL.Cmprs_Ret)
  psb_period=N      PSB every 2K<<N bytes, N in 0..=5 (default 0; rtit: RTIT_PKT_CNT.Pkt_Mask, N in 0..=3)
  tsc=0|1           TSC packets in PSB+, IA32_RTIT_CTL.TSCEn (default 1; pt only)
  mtc=0|1           MTC packets (ART = TSC), IA32_RTIT_CTL.MTCEn (default 0; rtit: RTIT_CTL.MTC_En)
  mtc_period=N      MTCFreq, N in 0,3,6,9 (default 0; rtit: RTIT_CTL.MTC_Range, N in 0..=3)
  cyc=0|1           cycle-accurate mode: CYC packets, IA32_RTIT_CTL.CYCEn (default 0; rtit: RTIT_CTL.Cycle_Acc)
  cyc_thresh=N      CycThresh, N in 0..=13 (default 0; pt only)
  less_pkts=0|1     RTIT_CTL.Less_Pkts: timing packets only while PacketEn (default 0; rtit only)
  filter=A-B        trace only IPs in [A,B] (hex, inclusive); up to 2 filter/stop ranges
  stop=A-B          TraceStop range [A,B]
  truth=0|1         also log every executed instruction (ground truth for tests)
  inherit=0|1       trace the processes the program forks, each into DIR/proc-PID/ (default 1;
                    0: like perf's --no-inherit, forked children are not traced)
  errata=E1+E5      Atom RTIT errata to reproduce for decoder testing (E1..E7 or all, '+'-separated;
                    rtit only; default none)
  buffer=BYTES      internal trace buffer (64..1G, K/M suffix) that overflows (OVF) when the drain
                    cannot keep up (pt only; default: none)
  drain=B/N         with buffer=: drain B bytes per N retired instructions (default 8/1);
                    drain=realtime:R: a background thread drains R bytes per second";

/// RTIT_PKT_CNT[17:16] Pkt_Mask: a PSB every 2K << N bytes for N in 0..=3 (§3.3.9).
const RTIT_MAX_PKT_MASK: u64 = 3;
/// RTIT_CTL[15:14] MTC_Range: MTC carries TSC[14+2N:7+2N] for N in 0..=3 (§4.2.12).
const RTIT_MAX_MTC_RANGE: u64 = 3;

#[derive(Clone, Debug)]
pub struct Options {
    pub out: PathBuf,
    /// `trace=`: which hardware is emulated.
    pub trace: TraceKind,
    /// The Intel PT configuration (trace=pt).
    pub config: TraceConfig,
    /// The RTIT MSR values (trace=rtit).
    pub rtit: RtitConfig,
    pub truth: bool,
    /// `inherit=`: forked children are traced too, each into its own directory (default on;
    /// perf's `--no-inherit` turns it off).
    pub inherit: bool,
    /// Internal trace buffer and drain (`buffer=`, `drain=`; Intel PT only).
    pub buffer: Option<crate::pt::buffer_spec::BufferSpec>,
    /// Atom RTIT errata to reproduce (`errata=E1+E5`, trace=rtit only; off by default).
    pub errata: crate::rtit::errata::Errata,
    /// The arguments as given (recorded in meta.txt).
    pub raw: Vec<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct OptionError(pub String);

impl std::fmt::Display for OptionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn err<T>(msg: String) -> Result<T, OptionError> {
    Err(OptionError(msg))
}

/// `errata=E1+E5` (`+`: QEMU splits plugin arguments at commas).
fn parse_errata(v: &str) -> Result<crate::rtit::errata::Errata, OptionError> {
    crate::rtit::errata::Errata::parse(&v.replace('+', ","))
        .map_err(|e| OptionError(format!("option 'errata': {e} (accepted: E1..E7 or all, joined with '+')")))
}

fn parse_bool(key: &str, v: &str) -> Result<bool, OptionError> {
    match v {
        "1" | "on" | "yes" | "true" => Ok(true),
        "0" | "off" | "no" | "false" => Ok(false),
        _ => err(format!("option '{key}': '{v}' is not a boolean (use 0 or 1)")),
    }
}

fn parse_u64(key: &str, v: &str) -> Result<u64, OptionError> {
    let r = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        v.parse::<u64>()
    };
    r.map_err(|_| OptionError(format!("option '{key}': '{v}' is not a number")))
}

fn parse_addr(key: &str, v: &str) -> Result<u64, OptionError> {
    let h = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")).unwrap_or(v);
    u64::from_str_radix(h, 16).map_err(|_| OptionError(format!("option '{key}': '{v}' is not a hex address")))
}

/// `A-B` (inclusive) or `A/SIZE` as perf's --filter writes it.
fn parse_range(key: &str, v: &str) -> Result<AddrRange, OptionError> {
    let range = if let Some((a, b)) = v.split_once('-') {
        AddrRange { a: parse_addr(key, a)?, b: parse_addr(key, b)? }
    } else if let Some((a, size)) = v.split_once('/') {
        let a = parse_addr(key, a)?;
        let size = parse_u64(key, size)?;
        if size == 0 {
            return err(format!("option '{key}': size must not be 0"));
        }
        AddrRange { a, b: a.saturating_add(size - 1) }
    } else {
        return err(format!("option '{key}': '{v}' must be START-END or START/SIZE (hex addresses)"));
    };
    if range.a > range.b {
        return err(format!("option '{key}': range start {:#x} is above its end {:#x}", range.a, range.b));
    }
    // IA32_RTIT_ADDRn_A/B hold canonical linear addresses (a WRMSR with a non-canonical one #GPs).
    for x in [range.a, range.b] {
        if (((x << 16) as i64) >> 16) as u64 != x {
            return err(format!("option '{key}': {x:#x} is not a canonical address"));
        }
    }
    Ok(range)
}

/// `option 'KEY' needs trace=WHICH (why)`.
fn only_with(key: &str, which: TraceKind, why: &str) -> OptionError {
    OptionError(format!("option '{key}' needs trace={} ({why})", which.name()))
}

impl Options {
    /// Parse `key=value` arguments as QEMU passes them to the plugin.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Options, OptionError> {
        let args: Vec<&str> = args.into_iter().collect();
        // `trace=` decides how the other terms are read, wherever it appears.
        let mut trace = TraceKind::Pt;
        for arg in &args {
            if let Some(v) = arg.strip_prefix("trace=") {
                trace = match v {
                    "pt" => TraceKind::Pt,
                    "rtit" => TraceKind::Rtit,
                    "off" => TraceKind::Off,
                    _ => return err(format!("option 'trace': '{v}' is not a trace kind (accepted: pt, rtit, off)")),
                };
            }
        }
        let rtit_mode = trace == TraceKind::Rtit;
        let mut ctl = RtitCtl::default();
        ctl.set_user(true).set_branch_en(true).set_tsc_en(true);
        let mut config = TraceConfig { num_ranges: NUM_ADDR_RANGES, ..TraceConfig::default() };
        let mut rtit = RtitConfig::user_default();
        let mut out = PathBuf::from("pttrace-out");
        let mut truth = false;
        let mut inherit = true;
        let (mut buffer_arg, mut drain_arg): (Option<String>, Option<String>) = (None, None);
        let mut errata = crate::rtit::errata::Errata::default();
        let mut ranges = 0usize;
        let mut raw = Vec::new();
        for arg in args {
            raw.push(arg.to_string());
            let Some((key, v)) = arg.split_once('=') else {
                return err(format!("option '{arg}' has no value (expected key=value)\n{USAGE}"));
            };
            match key {
                "trace" => {}
                "out" => {
                    // QEMU turns a bare `out` into `out=on`; that is a forgotten value, not a name.
                    if v.is_empty() || v == "on" {
                        return err("option 'out' needs a directory: out=DIR".into());
                    }
                    out = PathBuf::from(v);
                }
                "branch" => {
                    let on = parse_bool(key, v)?;
                    if rtit_mode && !on {
                        return err(
                            "option 'branch': RTIT has no BranchEn, COFI packets are always on (accepted with trace=rtit: 1)"
                                .into(),
                        );
                    }
                    ctl.set_branch_en(on);
                }
                "noretcomp" => {
                    let off = parse_bool(key, v)?;
                    ctl.set_dis_retc(off);
                    rtit.ctl.set_cmprs_ret(!off);
                }
                "tsc" => {
                    let on = parse_bool(key, v)?;
                    if rtit_mode {
                        return Err(only_with(key, TraceKind::Pt, "RTIT has no TSC packet; its time is MTC, mtc=1"));
                    }
                    ctl.set_tsc_en(on);
                }
                "psb_period" => {
                    let n = parse_u64(key, v)?;
                    if rtit_mode {
                        if n > RTIT_MAX_PKT_MASK {
                            return err(format!(
                                "option 'psb_period': {n} is not supported with trace=rtit (accepted: 0..=3, RTIT_PKT_CNT[17:16] Pkt_Mask)"
                            ));
                        }
                        rtit.pkt_mask = n as u8;
                    } else {
                        if n > 15 || PSB_FREQ_BITMAP & (1 << n) == 0 {
                            return err(format!(
                                "option 'psb_period': {n} is not supported (accepted: 0..=5, CPUID.(14H,1):EBX[31:16] = {PSB_FREQ_BITMAP:#06x})"
                            ));
                        }
                        ctl.set_psb_freq(n as u8);
                    }
                }
                "mtc" => {
                    let on = parse_bool(key, v)?;
                    ctl.set_mtc_en(on);
                    rtit.ctl.set_mtc_en(on);
                }
                "cyc" => {
                    let on = parse_bool(key, v)?;
                    ctl.set_cyc_en(on);
                    rtit.ctl.set_cycle_acc(on);
                }
                "mtc_period" => {
                    let n = parse_u64(key, v)?;
                    if rtit_mode {
                        if n > RTIT_MAX_MTC_RANGE {
                            return err(format!(
                                "option 'mtc_period': {n} is not supported with trace=rtit (accepted: 0..=3, RTIT_CTL[15:14] MTC_Range)"
                            ));
                        }
                        rtit.ctl.set_mtc_range(n as u8);
                    } else {
                        if n > 15 || MTC_PERIOD_BITMAP & (1 << n) == 0 {
                            return err(format!(
                                "option 'mtc_period': {n} is not supported (accepted: 0, 3, 6, 9; CPUID.(14H,1):EAX[31:16] = {MTC_PERIOD_BITMAP:#06x})"
                            ));
                        }
                        ctl.set_mtc_freq(n as u8);
                    }
                }
                "cyc_thresh" => {
                    let n = parse_u64(key, v)?;
                    if rtit_mode {
                        return Err(only_with(key, TraceKind::Pt, "RTIT has no CycThresh"));
                    }
                    if n > 15 || CYC_THRESH_BITMAP & (1 << n) == 0 {
                        return err(format!(
                            "option 'cyc_thresh': {n} is not supported (accepted: 0..=13; CPUID.(14H,1):EBX[15:0] = {CYC_THRESH_BITMAP:#06x})"
                        ));
                    }
                    ctl.set_cyc_thresh(n as u8);
                }
                "less_pkts" => {
                    let on = parse_bool(key, v)?;
                    if !rtit_mode {
                        return Err(only_with(key, TraceKind::Rtit, "RTIT_CTL[12] Less_Pkts has no Intel PT counterpart"));
                    }
                    rtit.ctl.set_less_pkts(on);
                }
                "filter" | "stop" => {
                    if ranges == NUM_ADDR_RANGES {
                        return err(format!(
                            "option '{key}': at most {NUM_ADDR_RANGES} filter/stop ranges (CPUID.(14H,1):EAX[2:0])"
                        ));
                    }
                    let range = parse_range(key, v)?;
                    if rtit_mode && range.b & LIP_ADDR_MASK == LIP_ADDR_MASK {
                        // RANGEn's limit RTIT_LIP(n+2) is exclusive and holds bits 47:0 (§3.3.6).
                        return err(format!(
                            "option '{key}': with trace=rtit a range cannot end at {:#x} (its exclusive limit needs 49 bits)",
                            range.b
                        ));
                    }
                    config.addr[ranges] = range;
                    let filter = key == "filter";
                    ctl.set_addr_cfg(ranges, if filter { AddrCfg::Filter } else { AddrCfg::TraceStop });
                    let what = if filter { RangeUse::Filter } else { RangeUse::TraceStop };
                    rtit.set_range(ranges, range.a & LIP_ADDR_MASK, range.b & LIP_ADDR_MASK, what);
                    ranges += 1;
                }
                "truth" => truth = parse_bool(key, v)?,
                "inherit" => inherit = parse_bool(key, v)?,
                "errata" if rtit_mode => errata = parse_errata(v)?,
                "errata" => return Err(only_with(key, TraceKind::Rtit, "the errata are those of the Atom RTIT reference, Appendix E")),
                "buffer" | "drain" if rtit_mode => {
                    return Err(only_with(key, TraceKind::Pt, "the RTIT model drains at every block"));
                }
                "buffer" => buffer_arg = Some(v.to_string()),
                "drain" => drain_arg = Some(v.to_string()),
                _ => return err(format!("unknown option '{key}'\n{USAGE}")),
            }
        }
        config.ctl = ctl;
        let buffer = match (buffer_arg, drain_arg) {
            (Some(b), d) => Some(crate::pt::buffer_spec::BufferSpec::parse(&b, d.as_deref()).map_err(OptionError)?),
            (None, Some(_)) => return err("option 'drain' needs buffer=BYTES".into()),
            (None, None) => None,
        };
        Ok(Options { out, trace, config, rtit, truth, inherit, buffer, errata, raw })
    }
}

/// Options of the full-system plugin (`qemu-system-x86_64`). The guest programs the trace
/// itself through the IA32_RTIT_* MSRs; the options choose the capability profile and host-side
/// copies for debugging and tests.
#[derive(Clone, Debug)]
pub struct SystemOptions {
    /// Capability profile the guest sees through CPUID leaf 14H.
    pub caps: crate::pt::caps::PtCaps,
    /// CPUID.01H family/model/stepping of the part the profile models (Skylake 06_5EH, Sapphire
    /// Rapids 06_8FH); None: QEMU's own (`profile=minimal`).
    pub signature: Option<crate::pt::caps::CpuSignature>,
    /// If set: also write each vCPU's packet stream to DIR/thread-N.pt for vCPU N-1 (exactly the bytes written to
    /// guest memory), code.img, and with `truth` the executed instructions to DIR/thread-N.truth.
    pub out: Option<PathBuf>,
    pub truth: bool,
    /// Branch Trace Store: CPUID.1 DS/DS-CPL, IA32_DEBUGCTL, IA32_DS_AREA, IA32_MISC_ENABLE[11].
    pub bts: bool,
    /// CPUID.1:ECX[2] DTES64: the 64-bit DS save area format in every mode.
    pub dtes64: bool,
    /// PEBS (`pebs=1`, with `bts=1`, not Silvermont): IA32_PEBS_ENABLE, MISC_ENABLE[12] = 0,
    /// PERF_CAPABILITIES format 3 (Skylake), 4 (Icelake), 1 (Nehalem) or 0 (Core 2). Opt-in: exact records need a conditional callback on every
    /// instruction, which costs even while PEBS is off.
    pub pebs: bool,
    /// The PMU of the profile (Ice Lake's with `profile=icelake`, Nehalem's with
    /// `profile=nehalem`, Core 2's with `profile=core2`, Skylake's otherwise).
    pub pmu: crate::pmu::PmuProfile,
    /// Architectural LBRs (`profile=sapphirerapids`, `crate::arch_lbr`) instead of the
    /// model-specific LBR stack.
    pub arch_lbr: bool,
    /// Atom RTIT instead of Intel PT (`profile=silvermont`): CPUID family/model 06_4DH, no PT
    /// enumeration, the RTIT MSRs 760H-77DH (seed 002).
    pub rtit: bool,
    /// Internal trace buffer and its drain (`buffer=`, `drain=`); None: packets reach the output
    /// at every block boundary and never overflow.
    pub buffer: Option<crate::pt::buffer_spec::BufferSpec>,
    /// Atom RTIT errata to reproduce (`errata=`, with profile=silvermont).
    pub errata: crate::rtit::errata::Errata,
    pub raw: Vec<String>,
}

pub const SYSTEM_USAGE: &str = "pttrace options for qemu-system-x86_64 (comma separated, key=value):
  profile=NAME      capability profile seen through CPUID leaf 14H: skylake (default, CPUID 06_5EH), minimal;
                    sapphirerapids: CPUID 06_8FH with the newer PT features (README \"Newest parts\")
                    and architectural LBR (README \"Architectural LBR\");
                    icelake: CPUID 06_7EH, perfmon v5, adaptive PEBS with pebs=1 (README \"Icelake profile\");
                    nehalem: CPUID 06_1AH, perfmon v3, the 176-byte PEBS record with pebs=1 (README \"Nehalem profile\");
                    core2: CPUID 06_17H (Penryn), perfmon v2, the 144-byte PEBS record on PMC0 with pebs=1 (README \"Core 2 profile\");
                    silvermont: Atom RTIT (seed 002) instead of Intel PT, CPUID family/model 06_4DH
  out=DIR           also copy every vCPU's trace stream to DIR/thread-N.pt, vCPU N-1 (and code.img)
  truth=0|1         with out=: log every executed instruction to DIR/thread-N.truth
  bts=0|1           Branch Trace Store and the Debug Store (CPUID.1 DS, IA32_DEBUGCTL, IA32_DS_AREA; default 1)
  dtes64=0|1        CPUID.1:ECX[2] DTES64: 64-bit DS save area format in all modes (default 1)
  pebs=0|1          PEBS (needs bts=1; Skylake format 3 / Icelake adaptive format 4 / Nehalem format 1 / Core 2 format 0, exact records; costs per instruction) (default 0)
  buffer=BYTES      internal trace buffer of BYTES (64..1G, K/M suffix): packets wait there and
                    overflow (OVF) when the drain cannot keep up; default: none
  drain=B/N         with buffer=: drain B bytes per N instructions (deterministic; default 8/1)
  drain=realtime:R  with buffer=: a background thread drains R bytes per second of wall time
  errata=E1+E5      with profile=silvermont: Atom RTIT errata to reproduce (E1..E7, all; default none)";

impl SystemOptions {
    /// The CPUID answers of these options (`crate::cpuid`), with the PMU of the CPU (`pmu`:
    /// the profile's counters, PEBS as `pebs=` chose).
    pub fn cpuid_profile(&self, pmu: crate::pmu::PmuCaps) -> crate::cpuid::CpuidProfile {
        crate::cpuid::CpuidProfile {
            caps: self.caps,
            signature: self.signature,
            bts: self.bts,
            dtes64: self.dtes64,
            rtit: self.rtit,
            pmu,
            arch_lbr: self.arch_lbr.then_some(crate::arch_lbr::ArchLbrCaps::SAPPHIRE_RAPIDS),
        }
    }

    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<SystemOptions, OptionError> {
        let mut o = SystemOptions {
            caps: crate::pt::caps::PtCaps::SKYLAKE,
            signature: Some(crate::pt::caps::SKYLAKE_SIGNATURE),
            out: None,
            truth: false,
            bts: true,
            dtes64: true,
            pebs: false,
            pmu: crate::pmu::PmuProfile::Skylake,
            arch_lbr: false,
            rtit: false,
            buffer: None,
            errata: crate::rtit::errata::Errata::default(),
            raw: Vec::new(),
        };
        let (mut buffer, mut drain) = (None, None);
        for arg in args {
            o.raw.push(arg.to_string());
            let Some((key, v)) = arg.split_once('=') else {
                return err(format!("option '{arg}' has no value (expected key=value)\n{SYSTEM_USAGE}"));
            };
            match key {
                "profile" if v == "silvermont" => {
                    // Its signature (06_4DH) comes with RTIT (`rtit::SILVERMONT`).
                    o.rtit = true;
                    o.signature = None;
                }
                "profile" => {
                    (o.caps, o.signature) = crate::pt::caps::PtCaps::profile(v).ok_or_else(|| {
                        OptionError(format!(
                            "option 'profile': unknown profile '{v}' (accepted: {}, silvermont)",
                            crate::pt::caps::PtCaps::PROFILE_NAMES.join(", ")
                        ))
                    })?;
                    o.pmu = match v {
                        "icelake" => crate::pmu::PmuProfile::Icelake,
                        "nehalem" => crate::pmu::PmuProfile::Nehalem,
                        "core2" => crate::pmu::PmuProfile::Core2,
                        _ => crate::pmu::PmuProfile::Skylake,
                    };
                    o.arch_lbr = v == "sapphirerapids";
                }
                "out" => {
                    if v.is_empty() || v == "on" {
                        return err("option 'out' needs a directory: out=DIR".into());
                    }
                    o.out = Some(PathBuf::from(v));
                }
                "truth" => o.truth = parse_bool(key, v)?,
                "bts" => o.bts = parse_bool(key, v)?,
                "dtes64" => o.dtes64 = parse_bool(key, v)?,
                "pebs" => o.pebs = parse_bool(key, v)?,
                "buffer" => buffer = Some(v.to_string()),
                "errata" => o.errata = parse_errata(v)?,
                "drain" => drain = Some(v.to_string()),
                _ => return err(format!("unknown option '{key}'\n{SYSTEM_USAGE}")),
            }
        }
        if o.truth && o.out.is_none() {
            return err("option 'truth' needs out=DIR".into());
        }
        if o.pebs && (!o.bts || o.rtit) {
            return err("option 'pebs' needs bts=1 and the Skylake, Icelake, Nehalem or Core 2 profile (PEBS records go to the Debug Store)".into());
        }
        if o.errata != crate::rtit::errata::Errata::default() && !o.rtit {
            return err("option 'errata' needs profile=silvermont (the errata are those of the Atom RTIT reference)".into());
        }
        match (buffer, drain) {
            (Some(b), d) => o.buffer = Some(crate::pt::buffer_spec::BufferSpec::parse(&b, d.as_deref()).map_err(OptionError)?),
            (None, Some(_)) => return err("option 'drain' needs buffer=BYTES".into()),
            (None, None) => {}
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_alone_gives_perf_default_user_branch_tracing() {
        let o = Options::parse(["out=/tmp/x"]).unwrap();
        assert_eq!(o.out, PathBuf::from("/tmp/x"));
        let c = o.config.ctl;
        assert!(c.user() && !c.os() && c.branch_en() && c.tsc_en() && !c.dis_retc());
        assert_eq!(c.psb_freq(), 0);
        assert!(!o.truth);
        assert!(o.inherit, "forked children are traced by default, as perf's inherit");
    }

    #[test]
    fn inherit_is_a_boolean_like_perfs_no_inherit() {
        assert!(!Options::parse(["inherit=0"]).unwrap().inherit);
        assert!(Options::parse(["inherit=1"]).unwrap().inherit);
        assert!(Options::parse(["inherit=2"]).unwrap_err().0.contains("option 'inherit': '2' is not a boolean"));
        assert!(Options::parse(["inherit="]).unwrap_err().0.contains("option 'inherit'"));
    }

    #[test]
    fn perf_terms_set_their_ctl_fields() {
        let o = Options::parse(["noretcomp=1", "psb_period=3", "tsc=0", "branch=0", "truth=1"]).unwrap();
        let c = o.config.ctl;
        assert!(c.dis_retc() && !c.tsc_en() && !c.branch_en());
        assert_eq!(c.psb_freq(), 3);
        assert!(o.truth);
    }

    #[test]
    fn filter_and_stop_ranges_fill_addr_pairs_in_order() {
        let o = Options::parse(["filter=0x401000-0x401fff", "stop=402000/0x10"]).unwrap();
        assert_eq!(o.config.ctl.addr_cfg(0), AddrCfg::Filter);
        assert_eq!(o.config.ctl.addr_cfg(1), AddrCfg::TraceStop);
        assert_eq!(o.config.addr[0], AddrRange { a: 0x401000, b: 0x401fff });
        assert_eq!(o.config.addr[1], AddrRange { a: 0x402000, b: 0x40200f });
    }

    #[test]
    fn bad_options_name_the_option_and_accepted_values() {
        let e = |a: &str| Options::parse([a]).unwrap_err().0;
        assert!(e("bogus=1").contains("unknown option 'bogus'"));
        assert!(e("psb_period=6").contains("accepted: 0..=5"));
        assert!(e("psb_period=x").contains("not a number"));
        assert!(e("branch=maybe").contains("not a boolean"));
        assert!(e("out").contains("no value"));
        assert!(e("out=on").contains("needs a directory"));
        assert!(e("filter=0x2000-0x1000").contains("above its end"));
        assert!(e("filter=0x0000800000000000-0x0000800000000001").contains("canonical"));
        assert!(e("mtc_period=2").contains("accepted: 0, 3, 6, 9"));
        assert!(e("cyc_thresh=14").contains("accepted: 0..=13"));
        let t = Options::parse(["mtc=1", "mtc_period=3", "cyc=1", "cyc_thresh=2"]).unwrap().config.ctl;
        assert!(t.mtc_en() && t.cyc_en());
        assert_eq!((t.mtc_freq(), t.cyc_thresh()), (3, 2));
        let s = |a: &str| SystemOptions::parse([a]).unwrap_err().0;
        assert!(s("profile=pentium").contains("accepted: skylake, minimal, sapphirerapids, icelake, nehalem, core2, silvermont"));
        let nhm = SystemOptions::parse(["profile=nehalem", "pebs=1"]).unwrap();
        assert_eq!(nhm.pmu, crate::pmu::PmuProfile::Nehalem);
        assert_eq!(nhm.signature.map(|s| s.cpuid_01_eax()), Some(0x0001_06A5));
        let core2 = SystemOptions::parse(["profile=core2", "pebs=1"]).unwrap();
        assert_eq!(core2.pmu, crate::pmu::PmuProfile::Core2);
        assert_eq!(core2.signature.map(|s| s.cpuid_01_eax()), Some(0x0001_067A));
        let icl = SystemOptions::parse(["profile=icelake", "pebs=1"]).unwrap();
        assert_eq!(icl.pmu, crate::pmu::PmuProfile::Icelake);
        assert_eq!(icl.signature.map(|s| s.cpuid_01_eax()), Some(0x0007_06E5));
        assert_eq!(SystemOptions::parse(["profile=skylake"]).unwrap().pmu, crate::pmu::PmuProfile::Skylake);
        assert!(SystemOptions::parse(["profile=silvermont"]).unwrap().rtit);
        let spr = SystemOptions::parse(["profile=sapphirerapids"]).unwrap();
        assert_eq!(spr.caps, crate::pt::caps::PtCaps::SAPPHIRE_RAPIDS);
        assert!(spr.arch_lbr);
        assert!(!SystemOptions::parse(["profile=skylake"]).unwrap().arch_lbr);
        assert!(!icl.arch_lbr);
        assert_eq!(spr.signature.map(|s| s.cpuid_01_eax()), Some(0x0008_06F8));
        let skl = Some(crate::pt::caps::SKYLAKE_SIGNATURE);
        assert_eq!(SystemOptions::parse(["profile=skylake"]).unwrap().signature, skl);
        assert_eq!(SystemOptions::parse([]).unwrap().signature, skl);
        assert_eq!(SystemOptions::parse(["profile=minimal"]).unwrap().signature, None);
        assert!(s("truth=1").contains("needs out=DIR"));
        assert!(s("branch=1").contains("unknown option 'branch'"));
        assert!(SystemOptions::parse(["profile=skylake", "out=/tmp/x", "truth=1"]).is_ok());
        let three = Options::parse(["filter=1-2", "filter=3-4", "stop=5-6"]).unwrap_err().0;
        assert!(three.contains("at most 2"));
    }

    #[test]
    fn trace_kind_defaults_to_pt_and_names_accepted_values() {
        assert_eq!(Options::parse(["out=/tmp/x"]).unwrap().trace, TraceKind::Pt);
        assert_eq!(Options::parse(["trace=pt"]).unwrap().trace, TraceKind::Pt);
        assert_eq!(Options::parse(["trace=rtit"]).unwrap().trace, TraceKind::Rtit);
        let e = Options::parse(["trace=lbr"]).unwrap_err().0;
        assert!(e.contains("option 'trace'") && e.contains("accepted: pt, rtit"), "{e}");
        assert!(Options::parse(["trace"]).unwrap_err().0.contains("no value"));
    }

    #[test]
    fn rtit_defaults_are_perf_user_branch_tracing() {
        let o = Options::parse(["trace=rtit"]).unwrap();
        let c = o.rtit.ctl;
        assert!(c.user() && !c.os() && c.cmprs_ret() && c.trace_active() && c.dest());
        assert!(!c.trace_en(), "Trace_En is set when the thread starts");
        assert!(!c.cycle_acc() && !c.mtc_en() && !c.sts_en() && !c.less_pkts() && !c.cr3_en());
        assert_eq!(o.rtit.pkt_mask, 0);
        assert!(o.rtit.edge_addresses().is_empty());
    }

    #[test]
    fn rtit_terms_set_rtit_ctl_fields_in_any_order() {
        let o = Options::parse(["noretcomp=1", "psb_period=3", "mtc=1", "mtc_period=2", "cyc=1", "less_pkts=1", "trace=rtit"])
            .unwrap();
        let c = o.rtit.ctl;
        assert!(!c.cmprs_ret() && c.mtc_en() && c.cycle_acc() && c.less_pkts());
        assert_eq!((c.mtc_range(), o.rtit.pkt_mask), (2, 3));
        let o = Options::parse(["trace=rtit", "filter=0x401000-0x401fff", "stop=402000/0x10"]).unwrap();
        assert_eq!(o.rtit.lip, [0x401000, 0x402000, 0x402000, 0x402010]);
        assert_eq!(o.rtit.range_uses(), [RangeUse::Filter, RangeUse::TraceStop]);
        // PT is unaffected by the RTIT-only fields.
        assert!(!Options::parse(["noretcomp=0", "cyc=1"]).unwrap().config.ctl.dis_retc());
    }

    #[test]
    fn rtit_rejects_what_it_does_not_have() {
        let e = |a: &[&str]| Options::parse(a.iter().copied()).unwrap_err().0;
        assert!(e(&["trace=rtit", "psb_period=4"]).contains("accepted: 0..=3"));
        assert!(e(&["trace=rtit", "mtc_period=9"]).contains("accepted: 0..=3"));
        assert!(e(&["branch=0", "trace=rtit"]).contains("accepted with trace=rtit: 1"));
        assert!(Options::parse(["trace=rtit", "branch=1"]).is_ok());
        assert!(e(&["trace=rtit", "tsc=1"]).contains("option 'tsc' needs trace=pt"));
        assert!(e(&["trace=rtit", "cyc_thresh=2"]).contains("option 'cyc_thresh' needs trace=pt"));
        assert!(e(&["less_pkts=1"]).contains("option 'less_pkts' needs trace=rtit"));
        assert!(e(&["trace=rtit", "less_pkts=2"]).contains("not a boolean"));
        assert!(e(&["trace=rtit", "filter=0xffffffffffff0000-0xffffffffffffffff"]).contains("cannot end at"));
    }
}
