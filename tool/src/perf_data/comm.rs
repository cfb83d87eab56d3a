//! PERF_RECORD_COMM (type 3): {header, u32 pid, u32 tid, char comm[] (padded to 8)} +
//! sample_id. `exec` sets PERF_RECORD_MISC_COMM_EXEC: the name comes from an execve.

use super::record::{Record, SampleId, MISC_USER};

pub const PERF_RECORD_COMM: u32 = 3;
pub const MISC_COMM_EXEC: u16 = 1 << 13;
/// The kernel's TASK_COMM_LEN - 1: longer names are cut.
const COMM_MAX: usize = 15;

pub fn comm(pid: u32, tid: u32, name: &str, exec: bool, id: &SampleId) -> Vec<u8> {
    let mut end = name.len().min(COMM_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let misc = if exec { MISC_USER | MISC_COMM_EXEC } else { MISC_USER };
    Record::new(PERF_RECORD_COMM, misc).u32(pid).u32(tid).string(&name[..end], 8).sample_id(id).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_layout() {
        let id = SampleId { pid: 5, tid: 5, time: 0, id: 2 };
        let r = comm(5, 5, "a-very-long-program-name", true, &id);
        assert_eq!(u16::from_le_bytes([r[4], r[5]]), 0x2002);
        assert_eq!(&r[16..32], b"a-very-long-pro\0");
        assert_eq!(r.len(), 8 + 8 + 16 + SampleId::SIZE);
        assert_eq!(u16::from_le_bytes([r[6], r[7]]) as usize, r.len());
    }
}
