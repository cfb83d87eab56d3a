//! pttrace host tool: dump and decode the Intel PT output written by the
//! pttrace QEMU plugin, using libipt (via the `libipt` crate).
//!
//! Modules:
//! - [`outdir`]: the output directory (`meta.txt`, `thread-N.pt`, `thread-N.truth`)
//! - [`code_image`]: `code.img` parsing into a sparse memory image
//! - [`decode`]: libipt instruction-flow decoding (`pttrace decode`)
//! - [`insn_ffi`]: safe wrapper over libipt's `pt_insn_*` (via libipt-sys)
//! - [`compare`]: comparison with ground truth (`pttrace compare`)
//! - [`dump`]: libipt packet dump (`pttrace dump --libipt`)
//! - [`pkt_ffi`]: safe wrapper over libipt's `pt_pkt_*` (via libipt-sys)
//! - [`dump_core`]: `pttrace dump` (to be served by `pttrace_core::pt::dump`)
//! - [`rtit`]: Atom RTIT streams with pttrace_core's RTIT decoder (`pttrace rtit-dump`,
//!   `pttrace rtit-decode`, and `pttrace compare` on RTIT traces)
//! - [`perf_data`]: perf.data for host perf (`pttrace perf`), one module per perf record type
//! - [`cli`]: argument parsing and dispatch

pub mod bts_expect;
pub mod cli;
pub mod code_image;
pub mod compare;
pub mod decode;
pub mod dump;
pub mod dump_core;
pub mod error;
pub mod hexfmt;
pub mod insn_ffi;
pub mod outdir;
pub mod perf_data;
pub mod pkt_ffi;
pub mod rtit;
