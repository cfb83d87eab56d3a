//! Error type shared by the commands, mapped onto exit statuses.

use std::fmt;
use std::path::Path;

/// Exit status: success.
pub const EXIT_OK: i32 = 0;
/// Exit status: the trace did not decode cleanly / comparison failed.
pub const EXIT_FAIL: i32 = 1;
/// Exit status: bad usage or an I/O / input-format problem.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: the run was cut short (SIGKILL, a crash, a full disk: meta.txt has no `end=`);
/// what reached the disk decoded without error (`decode`) or equals the ground truth as far as
/// both go (`compare`). A warning on stderr says so.
pub const EXIT_TRUNCATED: i32 = 3;

/// An error that aborts a command (as opposed to a decode error, which is
/// reported and counted, and only affects the exit status).
#[derive(Debug)]
pub enum ToolError {
    /// Bad command line. The message is printed followed by a usage hint.
    Usage(String),
    /// Missing/unreadable file, malformed input file, ...
    Input(String),
}

impl ToolError {
    pub fn usage(msg: impl Into<String>) -> Self {
        ToolError::Usage(msg.into())
    }

    pub fn input(msg: impl Into<String>) -> Self {
        ToolError::Input(msg.into())
    }

    /// An I/O error on `path`, with context.
    pub fn io(what: &str, path: &Path, err: std::io::Error) -> Self {
        ToolError::Input(format!("{what} {}: {err}", path.display()))
    }

    pub fn exit_code(&self) -> i32 {
        EXIT_USAGE
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Usage(m) | ToolError::Input(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ToolError {}

pub type Result<T> = std::result::Result<T, ToolError>;

/// Format a libipt error as `<message> [<Code>]`, e.g. `unknown opcode [BadOpc]`.
pub fn pt_err(e: &libipt::error::PtError) -> String {
    format!("{} [{:?}]", e.msg(), e.code())
}
