//! pttrace-core: a pure model of Intel's branch-trace hardware (no QEMU dependency).
#[macro_use]
mod macros;
/// The versioned code sideband code.img (issue 19).
pub mod block_ring;
pub mod model_placement;
pub mod code_img;
pub mod cs_base;
pub mod cs_cache;
pub mod cpuid;
pub mod msr_map;
pub mod process_dir;
pub mod guest_mem;
pub mod idt;
pub mod rflags;
pub mod phys_map;
pub mod insn_class;
pub mod pt;
pub mod rtit;
pub mod user_flow;
pub mod successor_prediction;
pub mod options;
pub mod system_flow;
/// The per-CPU facade of full-system mode and its guest port (issue 13).
pub mod system_cpu;
pub mod pmu;
pub mod bts;
pub mod lbr;
pub mod arch_lbr;
/// The lock around one vCPU's model state in the plugin (its own thread at every block, another
/// only at exit).
pub mod vcpu_cell;
