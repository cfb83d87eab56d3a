//! PERF_RECORD_FORK (type 7) and PERF_RECORD_EXIT (type 4), which share
//! `struct perf_record_fork` {header, u32 pid, ppid, tid, ptid, u64 time} + sample_id.

use super::record::{Record, SampleId};

pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_FORK: u32 = 7;

/// A task record: thread `tid` of process `pid`, created by (FORK) or reaped by (EXIT) thread
/// `ptid` of process `ppid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
}

impl Task {
    pub fn fork(&self, id: &SampleId) -> Vec<u8> {
        self.record(PERF_RECORD_FORK, id)
    }

    pub fn exit(&self, id: &SampleId) -> Vec<u8> {
        self.record(PERF_RECORD_EXIT, id)
    }

    fn record(&self, kind: u32, id: &SampleId) -> Vec<u8> {
        Record::new(kind, 0)
            .u32(self.pid)
            .u32(self.ppid)
            .u32(self.tid)
            .u32(self.ptid)
            .u64(self.time)
            .sample_id(id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_and_exit_layout() {
        let t = Task { pid: 10, ppid: 10, tid: 11, ptid: 10, time: 99 };
        let id = SampleId { pid: 10, tid: 11, time: 99, id: 2 };
        let f = t.fork(&id);
        assert_eq!(&f[0..4], &7u32.to_le_bytes());
        assert_eq!(f.len(), 8 + 24 + SampleId::SIZE);
        assert_eq!(&f[8..24], &[10, 0, 0, 0, 10, 0, 0, 0, 11, 0, 0, 0, 10, 0, 0, 0]);
        assert_eq!(u64::from_le_bytes(f[24..32].try_into().unwrap()), 99);
        let e = t.exit(&id);
        assert_eq!(&e[0..4], &4u32.to_le_bytes());
        assert_eq!(&e[4..], &f[4..]);
    }
}
