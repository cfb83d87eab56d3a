//! `pttrace perf DIR [-o FILE]`: a perf.data file that host perf decodes as a per-thread
//! `perf record -e intel_pt//u` recording of the traced program.
//!
//! Layout of the data section, in file order:
//! 1. AUXTRACE_INFO: the intel_pt PMU type, TSC conversion, config bit masks, CPUID 14H/15H
//!    values and the address-filter string;
//! 2. COMM (exec) of the main thread, MMAP2 of every executable mapping, FORK + COMM of each
//!    further thread, all at time 0 (before any trace);
//! 3. one AUXTRACE record per thread-N.pt (per-thread buffer: cpu = -1, its own queue);
//! 4. EXIT of each thread at its last TSC + 1, then FINISHED_ROUND.
//!
//! The plugin's TSC is each thread's retired-instruction count; the streams go into perf.data
//! with `TSC_OFFSET` added to every TSC packet (perf cannot start from TSC 0), and perf time =
//! TSC (time_mult 1, time_shift 0, time_zero 0), a 1 GHz TSC.
//!
//! pids are synthetic: the process is `PID`, thread N is `PID + N - 1`.

pub mod address_space;
pub mod attr;
pub mod auxtrace;
pub mod auxtrace_info;
pub mod comm;
pub mod elf;
pub mod features;
pub mod finished_round;
pub mod fork;
pub mod mmap2;
pub mod perf_file;
pub mod record;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use pttrace_core::options::{Options, TraceKind};
use pttrace_core::pt::rtit_ctl::AddrCfg;
use pttrace_core::pt::tracer::ART_RATIO;

use self::address_space::AddressSpace;
use self::attr::Attr;
use self::auxtrace::Auxtrace;
use self::auxtrace_info::IntelPtInfo;
use self::fork::Task;
use self::mmap2::Mmap2;
use self::perf_file::PerfFile;
use self::record::SampleId;
use crate::error::{Result, ToolError, EXIT_OK};
use crate::outdir::OutDir;

/// The intel_pt PMU type written into attr.type and AUXTRACE_INFO (any dynamic PMU number works;
/// 8 is what many Intel hosts assign).
pub const INTEL_PT_PMU_TYPE: u32 = 8;
/// The synthetic process id.
pub const PID: u32 = 1000;
/// Sample ids of the intel_pt and the dummy event.
const ID_PT: u64 = 1;
const ID_DUMMY: u64 = 2;

/// IA32_RTIT_CTL bits that are intel_pt config terms (arch/x86/events/intel/pt.c formats):
/// pt (TraceEn), cyc, pwr_evt, fup_on_ptw, mtc, tsc, noretcomp, ptw, branch, mtc_period,
/// cyc_thresh, psb_period.
const CONFIG_MASK: u64 = (1 << 0)
    | (1 << 1)
    | (1 << 4)
    | (1 << 5)
    | (0b111 << 9)
    | (1 << 12)
    | (1 << 13)
    | (0xf << 14)
    | (0xf << 19)
    | (0xf << 24);

/// The intel_pt attr.config for the IA32_RTIT_CTL value traced.
pub fn intel_pt_config(ctl: u64) -> u64 {
    (ctl & CONFIG_MASK) | 1
}

/// perf's bare filter string for the filter/TraceStop ranges, as file offsets in the mapped
/// files (how perf matches a user-space filter: `filter 0xOFF/0xSIZE@FILE`).
fn filter_string(opts: &Options, space: &AddressSpace) -> Result<String> {
    let ctl = opts.config.ctl;
    let mut parts = Vec::new();
    for n in 0..opts.config.num_ranges {
        let action = match ctl.addr_cfg(n) {
            AddrCfg::Filter => "filter",
            AddrCfg::TraceStop => "stop",
            _ => continue,
        };
        let r = opts.config.addr[n];
        let m = space.lookup(r.a).filter(|m| m.contains(r.b)).ok_or_else(|| {
            ToolError::input(format!(
                "the {action} range 0x{:x}-0x{:x} is not inside one file mapping: perf expresses user-space filters as offsets in a file",
                r.a, r.b
            ))
        })?;
        let off = r.a - m.start + m.pgoff;
        parts.push(format!("{action} 0x{off:x}/0x{:x}@{}", r.b - r.a + 1, m.path));
    }
    Ok(parts.join(","))
}

/// Why a directory cannot become a perf.data file, or the parsed plugin options.
fn check_dir(dir: &OutDir) -> Result<Options> {
    let p = dir.path.display();
    if dir.meta.get("format").is_none() {
        return Err(ToolError::input(format!(
            "{p} is not a pttrace output directory (no meta.txt with format=pttrace-1)"
        )));
    }
    if dir.meta.get("mode") != Some("user") {
        return Err(ToolError::input(format!(
            "{p}: perf.data can only be written for user-mode traces (meta.txt has mode={})",
            dir.meta.get("mode").unwrap_or("?")
        )));
    }
    if dir.is_rtit() {
        return Err(ToolError::input(format!(
            "{p} holds an Atom RTIT trace (trace=rtit): perf has no decoder for RTIT packets, only for Intel PT"
        )));
    }
    if dir.threads.is_empty() {
        return Err(ToolError::input(format!("{p} has no thread-N.pt stream (trace=off?)")));
    }
    let raw = dir.meta.get("options").unwrap_or("");
    let opts = Options::parse(raw.split(',').filter(|s| !s.is_empty()))
        .map_err(|e| ToolError::input(format!("{p}: meta.txt options= do not parse: {e}")))?;
    if opts.trace != TraceKind::Pt {
        return Err(ToolError::input(format!("{p}: trace={} has no Intel PT stream", opts.trace.name())));
    }
    Ok(opts)
}

fn hex_meta(dir: &OutDir, key: &str) -> Option<u64> {
    dir.meta.get(key).and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
}

/// Added to every TSC packet: perf's intel_pt decoder takes a zero timestamp for "no TSC yet"
/// and keeps walking until it sees another, but the plugin's TSC (retired instructions) starts
/// at 0. A multiple of ART_RATIO << 17, so CTC = TSC / ART_RATIO changes only above bit 16: the
/// TMA (CTC[15:0]) and MTC (CTC[16:9] at most) packets stay consistent with the TSC packets.
pub const TSC_OFFSET: u64 = 1 << 30;
const _: () = assert!(TSC_OFFSET % (ART_RATIO << 17) == 0);

/// Add `TSC_OFFSET` to every TSC packet of `trace` (7-byte payload, TSC[55:0]); returns the
/// largest TSC after the shift (0 if none).
pub fn shift_tsc(trace: &mut [u8]) -> u64 {
    use pttrace_core::pt::decode::PacketDecoder;
    use pttrace_core::pt::packet::Packet;
    let mut at = Vec::new();
    let mut dec = PacketDecoder::new(trace);
    loop {
        match dec.next() {
            Some(Ok(d)) => {
                if let Packet::Tsc { tsc } = d.packet {
                    at.push((d.offset, tsc));
                }
            }
            Some(Err(_)) => {}
            None if dec.is_halted() => {
                if dec.sync_forward().is_none() {
                    break;
                }
            }
            None => break,
        }
    }
    let mut max = 0;
    for (o, tsc) in at {
        let t = (tsc + TSC_OFFSET) & ((1 << 56) - 1);
        trace[o + 1..o + 8].copy_from_slice(&t.to_le_bytes()[..7]);
        max = max.max(t);
    }
    max
}

/// The last timestamp of a stream (after `shift_tsc`): its retired-instruction count (the
/// plugin's TSC) as decoded, or its largest TSC packet if that is later (a filter hides
/// instructions).
fn end_tsc(
    trace: &[u8],
    max_tsc: u64,
    code: &Rc<crate::code_image::CodeImage>,
    thread: u32,
    cpu: Option<(u16, u8, u8)>,
) -> u64 {
    let mut n = 0u64;
    let _ = crate::decode::decode_stream(
        trace,
        code,
        thread,
        cpu,
        |_| {
            n += 1;
            Ok(())
        },
        |_| {},
    );
    (n + TSC_OFFSET).max(max_tsc)
}

/// AUXTRACE_INFO of the plugin's Intel PT: its TSC is perf time, the config bits are the
/// IA32_RTIT_CTL positions, CPUID.15H gives TSC:CTC = ART_RATIO:1; `cbr`: the core:bus ratio of
/// the CBR packets.
fn intel_pt_info(filter: String, cbr: u8) -> IntelPtInfo {
    IntelPtInfo {
        pmu_type: INTEL_PT_PMU_TYPE,
        time_shift: 0,
        time_mult: 1,
        time_zero: 0,
        cap_user_time_zero: true,
        tsc_bit: 1 << 10,
        noretcomp_bit: 1 << 11,
        mtc_bit: 1 << 9,
        mtc_freq_bits: 0xf << 14,
        cyc_bit: 1 << 1,
        // CPUID.15H: EBX/EAX = TSC / core crystal clock.
        tsc_ctc_ratio_n: ART_RATIO as u32,
        tsc_ctc_ratio_d: 1,
        // The core clock behind CYC is the TSC clock and CBR packets carry `cbr`: the TSC runs at
        // the maximum non-turbo ratio (perf then shows CBR as 100%).
        max_non_turbo_ratio: cbr as u32,
        filter,
    }
}

/// The header features: build-ids of the mapped files, the machine description perf prints and
/// checks, event names, PMU mappings and the AUXTRACE index.
fn header_features(
    dir: &OutDir,
    space: &AddressSpace,
    events: [(Attr, &str, u64); 2],
    index: &[(u64, u64)],
) -> Vec<(u32, Vec<u8>)> {
    let ids: Vec<(&[u8], &str)> =
        space.files.iter().filter_map(|f| f.build_id.as_deref().map(|id| (id, f.path.as_str()))).collect();
    let (fam, model, step) = dir.cpu().unwrap_or((6, 0x55, 4));
    let desc: Vec<(Attr, &str, &[u64])> =
        events.iter().map(|(a, name, id)| (*a, *name, std::slice::from_ref(id))).collect();
    vec![
        (features::HEADER_BUILD_ID, features::build_ids(&ids)),
        (features::HEADER_HOSTNAME, features::string("pttrace")),
        (features::HEADER_OSRELEASE, features::string("pttrace user-mode emulation")),
        (features::HEADER_VERSION, features::string(env!("CARGO_PKG_VERSION"))),
        (features::HEADER_ARCH, features::string("x86_64")),
        (features::HEADER_NRCPUS, features::nrcpus(1)),
        (features::HEADER_CPUDESC, features::string("pttrace emulated Intel PT CPU")),
        (features::HEADER_CPUID, features::string(&format!("GenuineIntel,{fam},{model},{step}"))),
        (
            features::HEADER_CMDLINE,
            features::cmdline(&["pttrace".into(), "perf".into(), dir.path.display().to_string()]),
        ),
        (features::HEADER_EVENT_DESC, features::event_desc(&desc)),
        (
            features::HEADER_PMU_MAPPINGS,
            features::pmu_mappings(&[(attr::TYPE_SOFTWARE, "software"), (INTEL_PT_PMU_TYPE, "intel_pt")]),
        ),
        (features::HEADER_AUXTRACE, features::auxtrace_index(index)),
    ]
}

/// `pttrace perf DIR [-o FILE]`: write FILE (default DIR/perf.data) and, if code ran outside
/// every file mapping, FILE.code next to it.
pub fn cmd_perf(dir_path: &Path, out: Option<&Path>) -> Result<i32> {
    let dir = OutDir::open(dir_path)?;
    let opts = check_dir(&dir)?;
    let procs = dir.processes()?;
    if procs.len() > 1 {
        // One perf.data holds the process the run started with (issue 19); perf's per-process
        // sideband for forked children (PERF_RECORD_FORK/COMM, their mmaps) is not written.
        eprintln!(
            "pttrace: warning: {} also holds {} forked process(es) (proc-PID/): perf.data covers only the traced program's own process; convert a child with `pttrace perf {}/proc-PID`",
            dir.path.display(),
            procs.len() - 1,
            dir.path.display()
        );
    }
    if dir.cut_short() {
        eprintln!("{}", dir.cut_short_warning());
    }
    let out: PathBuf = out.map(Path::to_path_buf).unwrap_or_else(|| dir.path.join("perf.data"));
    let binary = dir.meta.get("binary").filter(|b| !b.is_empty()).ok_or_else(|| {
        ToolError::input(format!("{}: meta.txt names no binary= (no code ran?)", dir.path.display()))
    })?;
    let ctl: u64 = dir
        .meta
        .get("rtit_ctl")
        .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(opts.config.ctl.0 | 1);

    // Address space, checked against what ran.
    let (code, stats) = dir.load_code()?;
    for w in &stats.warnings {
        eprintln!("pttrace: warning: {w}");
    }
    if code.has_switches() {
        // perf reads code from files and one anonymous image: one version per address.
        return Err(ToolError::input(format!(
            "{}: the program rewrote code it had run ({} code versions in code.img); perf.data holds one version per address, so perf would decode other instructions: use `pttrace decode`",
            dir.path.display(),
            code.n_versions()
        )));
    }
    let maps = std::fs::read_to_string(dir.path.join("maps.txt")).unwrap_or_default();
    let mut space = AddressSpace::build(
        binary,
        hex_meta(&dir, "start_code"),
        hex_meta(&dir, "entry"),
        code.first_record(),
        &maps,
    )?;
    let out_abs = std::path::absolute(&out).map_err(|e| ToolError::io("cannot resolve", &out, e))?;
    let anon_path = PathBuf::from(format!("{}.code", out_abs.display()));
    space.check_code(&code, &anon_path)?;
    if let Some(img) = &space.anon_image {
        std::fs::write(&anon_path, img).map_err(|e| ToolError::io("cannot write", &anon_path, e))?;
        space.add_anon_file(&anon_path)?;
    }
    let filter = filter_string(&opts, &space)?;

    let info = intel_pt_info(filter, opts.config.cbr);

    let comm_name =
        Path::new(binary).file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let tid_of = |n: u32| PID + n - 1;
    let main_tid = tid_of(dir.threads[0]);
    let side = |tid: u32, time: u64| SampleId { pid: PID, tid, time, id: ID_DUMMY };

    let mut data = Vec::new();
    data.extend(info.to_record());
    data.extend(comm::comm(PID, main_tid, &comm_name, true, &side(main_tid, 0)));
    for m in &space.mappings {
        let f = space.files.iter().find(|f| f.path == m.path).expect("mapped files are read");
        let rec = Mmap2 {
            pid: PID,
            tid: main_tid,
            start: m.start,
            len: m.end - m.start,
            pgoff: m.pgoff,
            maj: f.maj,
            min: f.min,
            ino: f.ino,
            filename: m.path.clone(),
        };
        data.extend(rec.to_record(&side(main_tid, 0)));
    }
    for &n in &dir.threads[1..] {
        let t = Task { pid: PID, ppid: PID, tid: tid_of(n), ptid: main_tid, time: 0 };
        data.extend(t.fork(&side(tid_of(n), 0)));
        data.extend(comm::comm(PID, tid_of(n), &comm_name, false, &side(tid_of(n), 0)));
    }
    let code = Rc::new(code);
    let mut ends = Vec::new();
    let data_at = perf_file::data_offset(&[1, 1]);
    let mut index = Vec::new();
    for (idx, &n) in dir.threads.iter().enumerate() {
        let mut trace = dir.read_pt(n)?;
        let max_tsc = shift_tsc(&mut trace);
        ends.push((n, end_tsc(&trace, max_tsc, &code, n, dir.cpu())));
        let rec = Auxtrace { data: &trace, offset: 0, reference: n as u64, idx: idx as u32, tid: tid_of(n) };
        let rec = rec.to_record();
        index.push((data_at + data.len() as u64, auxtrace::HEADER_SIZE));
        data.extend(rec);
    }
    // Threads other than the main one end first, as a process does.
    ends.sort_by_key(|&(n, end)| (n == dir.threads[0], end));
    for (n, end) in ends {
        let t = Task { pid: PID, ppid: PID, tid: tid_of(n), ptid: main_tid, time: end + 1 };
        data.extend(t.exit(&side(tid_of(n), end + 1)));
    }
    data.extend(finished_round::finished_round());

    let pt_attr = Attr::intel_pt(INTEL_PT_PMU_TYPE, intel_pt_config(ctl));
    let dummy = Attr::dummy();
    let features = header_features(
        &dir,
        &space,
        [(pt_attr, "intel_pt//u", ID_PT), (dummy, "dummy:u", ID_DUMMY)],
        &index,
    );
    let file =
        PerfFile { attrs: vec![(pt_attr, vec![ID_PT]), (dummy, vec![ID_DUMMY])], data: &data, features };
    let f = std::fs::File::create(&out).map_err(|e| ToolError::io("cannot create", &out, e))?;
    let mut w = std::io::BufWriter::new(f);
    file.write(&mut w).and_then(|_| w.flush()).map_err(|e| ToolError::io("cannot write", &out, e))?;
    eprintln!(
        "pttrace: {}: {} thread(s), {} mapping(s) -> {}",
        dir.path.display(),
        dir.threads.len(),
        space.mappings.len(),
        out.display()
    );
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_stop_ranges_become_file_offsets() {
        let mut space = AddressSpace::default();
        space.mappings.push(address_space::Mapping {
            start: 0x401000,
            end: 0x479000,
            pgoff: 0x1000,
            path: "/bin/x".into(),
        });
        let o = Options::parse(["filter=0x401100-0x4011ff", "stop=0x402000/0x1"]).unwrap();
        assert_eq!(filter_string(&o, &space).unwrap(), "filter 0x1100/0x100@/bin/x,stop 0x2000/0x1@/bin/x");
        let o = Options::parse(["filter=0x478f00-0x479100"]).unwrap();
        assert!(filter_string(&o, &space).unwrap_err().to_string().contains("not inside one file mapping"));
        assert_eq!(filter_string(&Options::parse([]).unwrap(), &space).unwrap(), "");
    }

    #[test]
    fn tsc_packets_are_shifted_in_place() {
        // PSB, TSC 0x1234, PSBEND, PAD, TSC 5
        let mut t = [0x02u8, 0x82].repeat(8);
        t.extend([0x19, 0x34, 0x12, 0, 0, 0, 0, 0, 0x02, 0x23, 0x00, 0x19, 5, 0, 0, 0, 0, 0, 0]);
        let orig = t.clone();
        assert_eq!(shift_tsc(&mut t), TSC_OFFSET + 0x1234);
        let tsc = |o: usize, t: &[u8]| {
            u64::from_le_bytes([t[o], t[o + 1], t[o + 2], t[o + 3], t[o + 4], t[o + 5], t[o + 6], 0])
        };
        assert_eq!(tsc(17, &t), TSC_OFFSET + 0x1234);
        assert_eq!(tsc(28, &t), TSC_OFFSET + 5);
        // nothing else changed
        assert_eq!(t[..17], orig[..17]);
        assert_eq!(t[24..28], orig[24..28]);
    }

    #[test]
    fn config_keeps_the_perf_terms_of_rtit_ctl() {
        // TraceEn | User | BranchEn | TSCEn: perf record -e intel_pt//u's 0x2509 less User.
        assert_eq!(intel_pt_config(0x2509), 0x2401);
        // MTCEn, MTCFreq 3, CYCEn, CycThresh 2, PSBFreq 3, DisRETC; OS/User/ADDR0_CFG dropped.
        let ctl = 1 | 2 | 8 | (1 << 9) | (3 << 14) | (2 << 19) | (3 << 24) | (1 << 11) | (1 << 32);
        assert_eq!(intel_pt_config(ctl), 1 | 2 | (1 << 9) | (3 << 14) | (2 << 19) | (3 << 24) | (1 << 11));
    }
}
