//! `pttrace dump FILE` (without `--libipt`): the packet dump that will be
//! served by `pttrace_core::pt::dump::dump(bytes, out) -> Result<DumpStats, _>`.
//!
//! TEMPORARY FALLBACK: pttrace_core's packet parser is still being written,
//! so this currently delegates to the libipt dumper. To switch over, replace
//! the body with a call to `pttrace_core::pt::dump::dump(bytes, out)` and map
//! its `DumpStats` (packet and error counts) onto `DumpOutcome`.

use std::io::{self, Write};

use crate::dump::{dump_file_libipt, DumpOptions, DumpOutcome};

/// Dump `bytes` (one raw PT stream) to `out`. The dump is clean iff the
/// returned `errors == 0`; `Err` only for output I/O failures.
pub fn dump_with_core<W: Write>(bytes: &[u8], out: &mut W) -> io::Result<DumpOutcome> {
    // Fallback until pttrace_core::pt::dump is available (see module docs).
    dump_file_libipt(bytes, DumpOptions::default(), out)
}
