//! `pttrace dump FILE` (without `--libipt`): the packet dump of pttrace_core's own packet
//! parser (`pttrace_core::pt::dump`), ptdump-style. `--libipt` gives libipt's view of the same
//! bytes for comparison.

use std::io::{self, Write};

use crate::dump::DumpOutcome;

/// Dump `bytes` (one raw PT stream) to `out`. The dump is clean iff the returned `errors == 0`
/// (bytes before the first PSB count as an error, as in the libipt dumper); `Err` only for
/// output I/O failures.
pub fn dump_with_core<W: Write>(bytes: &[u8], out: &mut W) -> io::Result<DumpOutcome> {
    let s = pttrace_core::pt::dump::dump_io(bytes, out)?;
    Ok(DumpOutcome {
        packets: (s.packets + s.unsupported) as u64,
        errors: s.errors as u64 + u64::from(s.skipped_bytes > 0),
    })
}
