//! How many executed blocks can pass before the Intel PT bytes they add might reach an output
//! event (issue 13): a ToPA region filled (its INT PMI, STOP or the next entry's load, SDM Vol. 3C
//! §33.2.7.2) must happen at the block that fills it, so blocks that are only recorded, and run
//! through the packet model later, may not be able to get there. The bound is a worst case of
//! the packets a block can add while blocks are only recorded, which is a steady state: no mode
//! change, far transfer, MOV CR3, event, CYC or Event Trace packet (each of those stops
//! recording first).
//!
//! What such a block adds, at most:
//! - one TIP (header + 8 IP bytes: 9 bytes) for a near indirect transfer or an uncompressed
//!   RET, and one TNT bit for a conditional branch or a compressed RET. TNT bits go out as short
//!   TNT (1 byte for up to 6 bits) or long TNT (8 bytes for 7 to 47 bits): at most 8/7 byte per
//!   bit, plus the flush of the bits pending before the first block (at most 8 bytes);
//! - with MTCEn, the timing packets before its packets: one MTC (2 bytes), or TSC + TMA (15)
//!   after a gap an MTC cannot span (`Tracer::timing_packets`: one per change of the clock, and
//!   the recorded clock changes at most once per block);
//! - with ADDRn filter or TraceStop ranges, the transitions of FilterEn at its start and end:
//!   TIP.PGE, TIP.PGD, FUP (9 each), MODE.Exec, TraceStop (2 each);
//! - PSB+ when PacketByteCnt crosses the PSBFreq period: flush of pending TNT (8), PSB (16),
//!   TSC (8), TMA (7), PIP (8), CBR (4), MODE.Exec (2), FUP (9), PSBEND (2): 64 bytes, at most once
//!   per 2 KiB of output (the smallest period, 2K << 0; its bytes count towards the next).
//!
//! So n blocks add at most `C + n * P + K * (1 + bytes / 2048)` bytes with `C` the pending
//! TNT, `P` the per-block bound and `K` a PSB+; solving for the bytes, within a quiet room of `R`
//! bytes n may reach `(R * (1 - K / 2048) - C - K) / P`. Power event packets (PwrEvtEn) are not
//! bounded here: with them the per-block bound stays the older, wider `WIDE_BLOCK_BYTES`.

use super::rtit_ctl::{AddrCfg, RtitCtl};

/// Bytes pending from before the first block (a long TNT), with room to spare.
pub const PENDING_BYTES: u64 = 16;
/// A PSB+ at most (64 bytes, see the module documentation), doubled.
pub const PSB_PLUS_BYTES: u64 = 128;
/// The smallest PSBFreq period (IA32_RTIT_CTL[27:24] = 0: 2K bytes).
pub const MIN_PSB_PERIOD: u64 = 2048;
/// A block without timing or filter packets: a TIP (9) and its share of TNT (8/7), rounded up
/// with room to spare.
pub const BLOCK_BYTES: u64 = 16;
/// With MTCEn: TSC + TMA (15) more, rounded up.
pub const MTC_BLOCK_BYTES: u64 = BLOCK_BYTES + 16;
/// With filter or TraceStop ranges: TIP.PGE, TIP.PGD, FUP, MODE.Exec, TraceStop (31) more,
/// rounded up.
pub const FILTER_BLOCK_BYTES: u64 = MTC_BLOCK_BYTES + 32;
/// The bound used with packets this module does not bound (power events).
pub const WIDE_BLOCK_BYTES: u64 = 256;

/// The most bytes one recorded block adds under `ctl` (see the module documentation).
pub fn block_bytes(ctl: RtitCtl, ranges: usize) -> u64 {
    if ctl.pwr_evt_en() {
        WIDE_BLOCK_BYTES
    } else if (0..ranges).any(|n| ctl.addr_cfg(n) != AddrCfg::Unused) {
        FILTER_BLOCK_BYTES
    } else if ctl.mtc_en() {
        MTC_BLOCK_BYTES
    } else {
        BLOCK_BYTES
    }
}

/// How many blocks adding at most `per_block` bytes each may run before the output can reach an
/// event `room` bytes away (the quiet room less the bytes held back).
pub fn blocks_within(room: u64, per_block: u64) -> u64 {
    // room * (1 - K / 2048), rounded down, without overflow (a single range's room is u64::MAX).
    let usable = room - room.div_ceil(MIN_PSB_PERIOD / PSB_PLUS_BYTES);
    usable.saturating_sub(PENDING_BYTES + PSB_PLUS_BYTES) / per_block.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worst case the bound covers, written out: `n` blocks each adding `per_block`, the
    /// pending TNT first, and a PSB+ whenever the bytes since the last one reach the period.
    fn worst_bytes(n: u64, per_block: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut total = PENDING_BYTES;
        let mut since_psb = PENDING_BYTES;
        // A PSB+ may be due right at the start.
        total += PSB_PLUS_BYTES;
        since_psb += PSB_PLUS_BYTES;
        for _ in 0..n {
            total += per_block;
            since_psb += per_block;
            if since_psb >= MIN_PSB_PERIOD {
                total += PSB_PLUS_BYTES;
                since_psb = PSB_PLUS_BYTES;
            }
        }
        total
    }

    #[test]
    fn the_blocks_allowed_never_fill_the_room_in_the_worst_case() {
        for per_block in [BLOCK_BYTES, MTC_BLOCK_BYTES, FILTER_BLOCK_BYTES, WIDE_BLOCK_BYTES] {
            for room in [0, 100, 144, 300, 2047, 2048, 4095, 4096, 65_535, 524_287, 1 << 24] {
                assert!(blocks_within(u64::MAX, per_block) > u64::MAX / per_block / 2);
                let n = blocks_within(room, per_block);
                assert!(worst_bytes(n, per_block) <= room, "room {room}, {per_block} bytes a block: {n} blocks");
            }
        }
    }

    #[test]
    fn a_512_kib_region_lets_thousands_of_plain_blocks_pass_where_the_wide_bound_let_two_thousand() {
        let room = 512 * 1024 - 1;
        assert_eq!(room / WIDE_BLOCK_BYTES, 2047);
        let n = blocks_within(room, BLOCK_BYTES);
        assert!(n > 30_000 && n < 32_768, "{n}");
        // Not much below what the worst case would actually allow.
        assert!(worst_bytes(n + n / 8, BLOCK_BYTES) > room);
    }

    #[test]
    fn the_per_block_bound_widens_with_timing_filters_and_power_events() {
        let mut ctl = RtitCtl(0);
        ctl.set_trace_en(true).set_branch_en(true);
        assert_eq!(block_bytes(ctl, 2), BLOCK_BYTES);
        ctl.set_mtc_en(true);
        assert_eq!(block_bytes(ctl, 2), MTC_BLOCK_BYTES);
        ctl.set_addr_cfg(1, AddrCfg::TraceStop);
        assert_eq!(block_bytes(ctl, 2), FILTER_BLOCK_BYTES);
        // A range the part does not have is not there.
        assert_eq!(block_bytes(ctl, 1), MTC_BLOCK_BYTES);
        ctl.set_pwr_evt_en(true);
        assert_eq!(block_bytes(ctl, 2), WIDE_BLOCK_BYTES);
    }
}
