//! PERF_RECORD_FINISHED_ROUND (type 68): a header only. perf's ordered-events queue may sort and
//! deliver everything before it.

use super::record::Record;

pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;

pub fn finished_round() -> Vec<u8> {
    Record::new(PERF_RECORD_FINISHED_ROUND, 0).finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn eight_bytes() {
        assert_eq!(super::finished_round(), [68, 0, 0, 0, 0, 0, 8, 0]);
    }
}
