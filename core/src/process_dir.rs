//! The directory of a forked process in a user-mode output directory (issue 19), shared by the
//! plugin (writer) and the tool (reader): `proc-PID`, or `proc-PID.K` (K >= 2) when a process of
//! the same run had that pid before. The process the run started with writes to the output
//! directory itself.

/// The name of the K-th directory for `pid` (K = 1: `proc-PID`).
pub fn name(pid: u32, k: u32) -> String {
    if k <= 1 {
        format!("proc-{pid}")
    } else {
        format!("proc-{pid}.{k}")
    }
}

/// `proc-PID` or `proc-PID.K` -> (PID, K) (plain decimal numbers; K = 1 without a suffix).
pub fn parse(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("proc-")?;
    let (pid, k) = rest.split_once('.').unwrap_or((rest, "1"));
    let num = |s: &str| -> Option<u32> { (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())).then(|| s.parse().ok()).flatten() };
    Some((num(pid)?, num(k)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_junk_is_refused() {
        assert_eq!(name(1234, 1), "proc-1234");
        assert_eq!(name(1234, 2), "proc-1234.2");
        for (pid, k) in [(1, 1), (4194304, 1), (77, 2), (77, 999)] {
            assert_eq!(parse(&name(pid, k)), Some((pid, k)));
        }
        for junk in ["proc-", "proc-12.x", "proc-12.", "proc-.2", "proc-+1", "proc-1 ", "thread-1.pt", "proc-99999999999"] {
            assert_eq!(parse(junk), None, "{junk}");
        }
    }
}
