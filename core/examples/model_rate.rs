//! How fast the Intel PT model runs recorded blocks (issue 13), without QEMU: a synthetic loop
//! of blocks (a Jcc taken 3 of 4 times, a direct CALL, a RET that compresses, fall-throughs)
//! through `UserFlow::run` and `SystemFlow::steady_run`, printed as ns per block.
//! `cargo run --release -p pttrace-core --example model_rate`

use pttrace_core::insn_class::{BranchKind, ClassifiedInsn};
use pttrace_core::pt::rtit_ctl::RtitCtl;
use pttrace_core::pt::tracer::{Context, TraceConfig, Tracer};
use pttrace_core::system_flow::{SysBlock, SystemFlow};
use pttrace_core::user_flow::{BlockEnd, ExecutedBlock, UserFlow};

/// This thread's CPU time (ns), from /proc/thread-self/schedstat: wall time would count the
/// time other jobs hold the CPU.
fn cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    s.split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[derive(Clone, Copy)]
struct Rec {
    pc: u64,
    end: &'static BlockEnd,
}
impl ExecutedBlock for Rec {
    fn pc(&self) -> u64 {
        self.pc
    }
    fn end(&self) -> &'static BlockEnd {
        self.end
    }
    fn n_insns(&self) -> u64 {
        4
    }
}

fn insn(ip: u64, len: u8, kind: BranchKind) -> ClassifiedInsn {
    ClassifiedInsn { ip, len, kind, rep_string: false }
}

/// One loop iteration: (block start, last instruction); the successor of each is the next
/// entry's start.
fn iteration(i: u64) -> Vec<(u64, ClassifiedInsn)> {
    let taken = i % 4 != 0;
    let mut v = vec![(0x401000, insn(0x401010, 2, BranchKind::Conditional { target: 0x401040 }))];
    if taken {
        v.push((0x401040, insn(0x401050, 5, BranchKind::DirectCall { target: 0x402000 })));
        v.push((0x402000, insn(0x402008, 1, BranchKind::Return)));
        v.push((0x401055, insn(0x401060, 2, BranchKind::DirectJump { target: 0x401000 })));
    } else {
        v.push((0x401012, insn(0x401020, 2, BranchKind::DirectJump { target: 0x401000 })));
    }
    v
}

fn main() {
    let mut ctl = RtitCtl::default();
    ctl.set_user(true).set_os(true).set_branch_en(true);
    let cfg = TraceConfig { ctl, ..TraceConfig::default() };
    let blocks: Vec<(u64, ClassifiedInsn)> = (0..4096).flat_map(iteration).collect();
    let n_rounds: usize = std::env::var("ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let reps: usize = std::env::var("REPS").ok().and_then(|v| v.parse().ok()).unwrap_or(7);
    let total = (blocks.len() * n_rounds) as f64;

    let only = std::env::var("MODE").unwrap_or_default();
    // User mode.
    if only != "system" {
    let ends: Vec<&'static BlockEnd> = blocks.iter().map(|&(_, l)| &*Box::leak(Box::new(BlockEnd::new(l)))).collect();
    let recs: Vec<Rec> = blocks.iter().zip(&ends).map(|(&(pc, _), &end)| Rec { pc, end }).collect();
    let mut t = Tracer::new(cfg, Context::USER64);
    let mut flow = UserFlow::default();
    flow.start(&mut t);
    let mut clock = 0;
    let mut best = u64::MAX;
    for _ in 0..reps {
        let t0 = cpu_ns();
        for _ in 0..n_rounds {
            flow.run(&mut t, &recs[..], &mut clock);
            t.take_output();
        }
        best = best.min(cpu_ns() - t0);
    }
    println!("user mode:   {:.2} ns/block (best of {reps})", best as f64 / total);
    }
    if only == "user" {
        return;
    }

    // Full system (recorded blocks of one translation each, delta 0).
    let sys: Vec<&'static SysBlock> = blocks.iter().map(|&(pc, l)| &*Box::leak(Box::new(SysBlock::new(vec![pc, l.ip], l, false)))).collect();
    // As the plugin records them: `last_started` is the previous block's last instruction (it
    // was not left early).
    struct SysRec {
        block: &'static SysBlock,
        last_started: u64,
    }
    impl pttrace_core::system_flow::RecordedBlock for SysRec {
        type Block = &'static SysBlock;
        fn pc(&self) -> u64 {
            self.block.insns[0]
        }
        fn translated(&self) -> u64 {
            self.block.insns[0]
        }
        fn last_started(&self) -> u64 {
            self.last_started
        }
        fn tsc(&self) -> u64 {
            0
        }
        fn block(&self, _slot: usize) -> &&'static SysBlock {
            &self.block
        }
    }
    let recs: Vec<SysRec> = (0..sys.len()).map(|k| SysRec { block: sys[k], last_started: sys[(k + sys.len() - 1) % sys.len()].last.ip }).collect();
    let mut t = Tracer::new(cfg, Context::KERNEL64);
    t.enable(0x401000);
    let mut flow = SystemFlow::<&'static SysBlock>::default();
    struct Cpu;
    impl pttrace_core::system_flow::CpuView for Cpu {
        fn context(&mut self) -> Context {
            Context::KERNEL64
        }
    }
    let mut best = u64::MAX;
    for _ in 0..reps {
    let t0 = cpu_ns();
    for _ in 0..n_rounds {
        let mut i = 0;
        while i < sys.len() {
            i += flow.steady_records(&mut t, &recs[i..], 2, None, |_, _| {});
            if let Some(r) = recs.get(i) {
                let b = r.block;
                flow.block(&mut t, b.insns[0], &[b, b, b], 0, r.last_started, &mut Cpu);
                i += 1;
            }
        }
        t.take_output();
    }
    best = best.min(cpu_ns() - t0);
    }
    println!("full system: {:.2} ns/block (best of {reps})", best as f64 / total);
}
