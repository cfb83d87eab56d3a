//! The plugin options that configure the internal trace buffer (`buffer=BYTES`,
//! `drain=BYTES/INSNS` or `drain=realtime:BYTES_PER_SEC`), parsed into what the tracer and the
//! plugin need. See `internal_buffer` for the model.

use super::internal_buffer::{Bandwidth, BufferConfig};

/// How the internal buffer drains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DrainSpec {
    /// Deterministic: `bytes` may leave the buffer per `insns` retired instructions.
    PerInstructions { bytes: u64, insns: u64 },
    /// Real time: a background thread grants `bytes_per_sec` of bandwidth from the wall clock.
    RealTime { bytes_per_sec: u64 },
}

/// `buffer=` and `drain=` together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferSpec {
    pub capacity: usize,
    pub drain: DrainSpec,
}

impl BufferSpec {
    /// The default drain when only `buffer=` is given: 8 bytes per instruction, far above what
    /// branch tracing produces (hardware drains several bytes per cycle), so only bursts overflow.
    pub const DEFAULT_DRAIN: DrainSpec = DrainSpec::PerInstructions { bytes: 8, insns: 1 };

    /// Parse the values of `buffer=` (bytes, >= 64; suffix K or M allowed) and `drain=`.
    pub fn parse(buffer: &str, drain: Option<&str>) -> Result<BufferSpec, String> {
        let capacity = parse_size(buffer)
            .filter(|&c| (64..=1 << 30).contains(&c))
            .ok_or_else(|| format!("option 'buffer': '{buffer}' is not a size in bytes between 64 and 1G (e.g. 4096, 16K)"))?;
        let drain = match drain {
            None => Self::DEFAULT_DRAIN,
            Some(d) => parse_drain(d).ok_or_else(|| {
                format!("option 'drain': '{d}' is neither BYTES/INSNS (e.g. 1/4: one byte per 4 instructions) nor realtime:BYTES_PER_SEC (e.g. realtime:100M)")
            })?,
        };
        Ok(BufferSpec { capacity, drain })
    }

    /// The tracer's buffer configuration (for the real-time mode the bandwidth unit is a byte of
    /// credit handed over by the drainer thread).
    pub fn config(&self) -> Result<BufferConfig, String> {
        let bw = match self.drain {
            DrainSpec::PerInstructions { bytes, insns } => Bandwidth::new(bytes, insns),
            DrainSpec::RealTime { .. } => Bandwidth::new(1, 1),
        }
        .map_err(|e| format!("option 'drain': {e:?}"))?;
        BufferConfig::new(self.capacity, bw).map_err(|e| format!("option 'buffer': {e:?}"))
    }
}

impl BufferSpec {
    /// The background drainer thread of the real-time mode (None in the deterministic mode).
    pub fn spawn_drainer(&self) -> std::io::Result<Option<super::internal_buffer::RealTimeDrainer>> {
        match self.drain {
            DrainSpec::RealTime { bytes_per_sec } => super::internal_buffer::RealTimeDrainer::spawn(
                super::internal_buffer::WallClock::new(),
                bytes_per_sec,
                std::time::Duration::from_micros(100),
            )
            .map(Some),
            DrainSpec::PerInstructions { .. } => Ok(None),
        }
    }
}

fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1 << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_drain(s: &str) -> Option<DrainSpec> {
    if let Some(rate) = s.strip_prefix("realtime:") {
        let bytes_per_sec = parse_size(rate)? as u64;
        return (bytes_per_sec > 0).then_some(DrainSpec::RealTime { bytes_per_sec });
    }
    let (b, n) = s.split_once('/')?;
    let (bytes, insns) = (b.parse::<u64>().ok()?, n.parse::<u64>().ok()?);
    (bytes > 0 && insns > 0).then_some(DrainSpec::PerInstructions { bytes, insns })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_and_drain_values_parse_with_units() {
        assert_eq!(
            BufferSpec::parse("16K", Some("1/4")),
            Ok(BufferSpec { capacity: 16384, drain: DrainSpec::PerInstructions { bytes: 1, insns: 4 } })
        );
        assert_eq!(
            BufferSpec::parse("512", Some("realtime:100M")).unwrap().drain,
            DrainSpec::RealTime { bytes_per_sec: 100 << 20 }
        );
        assert_eq!(BufferSpec::parse("4096", None).unwrap().drain, BufferSpec::DEFAULT_DRAIN);
        assert!(BufferSpec::parse("4096", None).unwrap().config().is_ok());
    }

    #[test]
    fn malformed_values_name_the_option_and_the_accepted_forms() {
        assert!(BufferSpec::parse("12", None).unwrap_err().contains("option 'buffer'"));
        assert!(BufferSpec::parse("lots", None).unwrap_err().contains("between 64 and 1G"));
        assert!(BufferSpec::parse("4K", Some("0/4")).unwrap_err().contains("option 'drain'"));
        assert!(BufferSpec::parse("4K", Some("fast")).unwrap_err().contains("realtime:BYTES_PER_SEC"));
    }
}
