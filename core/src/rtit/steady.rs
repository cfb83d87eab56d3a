//! Runs of recorded user-mode blocks through the RTIT model in its steady state (issue 13), the
//! counterpart of `crate::pt::tracer::SteadyRun` for Atom RTIT.
//!
//! In the steady state (PacketEn = 1, no buffer overflow, RTIT_CTL[Cycle_Acc] = 0, RTIT_EVENTS
//! without address ranges and without an always-on TraceStop, no internal buffer limit, no
//! delayed PSB) an instruction's retirement reduces to Table 19 rows 1, 2, 6, 7, 11, 13, 14, 17,
//! 18: a TNT result for a conditional branch or a compressed RET (§4.2.3.2), RTIT_LAST_CALL_NLIP
//! for a near CALL, a TIP with the LIP compressed against RTIT_LAST_LIP (Table 18) for a near
//! indirect transfer, and the PSB when RTIT_PKT_CNT reaches the monitored bit (§3.3.9). The
//! clock (`RtitTracer::set_tsc`) only advances RTIT_CNTP and the watched MTC bits, which send an
//! MTC when they change with RTIT_CTL[MTC_En].
//!
//! [`RtitTracer::user_blocks`] does exactly that for a run of blocks, keeping RTIT_TNT_BUFF,
//! RTIT_LAST_CALL_NLIP, RTIT_LAST_LIP, the clock and the byte count in registers, and storing
//! packet bytes without a call. A block that would need anything else ends the run before it
//! changed anything (the general path takes it): a successor that the previous block's fixed
//! successors do not explain, a far transfer, a clock that changes the MTC bits with MTC_En, and
//! a TIP whose bytes would reach the PSB period (the PSB then falls between its packets).

use super::encode::tip_header;
use super::lip::{LastLip, LIP_MASK};
use super::packet::Lip;
use super::msr::{EventId, RtitLastCallNlip, RtitTntBuff, CNTP_MASK};
use super::tracer::RtitTracer;
use crate::user_flow::{BlockEnd, ExecutedBlock};

/// RTIT_TNT_BUFF with six results: a full TNT, which goes out as its own byte (the register
/// value is the packet, `(1 << count) | bits`).
const TNT_FULL: u64 = 1 << 6;

/// RTIT_LAST_LIP[32] CMPRS_LIP_Valid (§3.3.7).
const LAST_LIP_VALID: u64 = 1 << 32;

/// RTIT_CNTP[21]: FUP.PCC when it is set after an instruction (§4.2.6).
const CNTP_MSB: u64 = 1 << 21;

/// Bytes of room the run keeps beyond the PSB period: a TIP's payload is stored as 8 bytes.
const SLACK: usize = 16;

impl RtitTracer {
    /// User mode (issue 13): the recorded blocks of `blocks`, oldest first, after the block that
    /// ended with `prev`, for as long as the steady state explains each from the one before (see
    /// the module notes): exactly what `set_tsc` with the clock advanced by the block's
    /// instruction count, then `UserFlow::block`, do for each, PSBs included. `clock` advances
    /// by the instruction count of each block taken and `prev` becomes the last one's end.
    /// Returns how many were taken: fewer than all means the next block is for the general path.
    pub fn user_blocks<B: ExecutedBlock>(&mut self, prev: &mut &'static BlockEnd, blocks: &[B], clock: &mut u64) -> usize {
        let mut n = 0;
        while n < blocks.len() {
            let Some(room) = self.steady_room(*clock) else { break };
            let rest = &blocks[n..];
            let ctl = self.msrs.ctl;
            let (k, psb) = match (ctl.cycle_acc(), ctl.mtc_en()) {
                (false, false) => self.steady_segment::<false, false, B>(prev, rest, clock, room),
                (false, true) => self.steady_segment::<false, true, B>(prev, rest, clock, room),
                (true, false) => self.steady_segment::<true, false, B>(prev, rest, clock, room),
                (true, true) => self.steady_segment::<true, true, B>(prev, rest, clock, room),
            };
            n += k;
            if !psb {
                break;
            }
            // The TNT packet of the run's last block reached RTIT_PKT_CNT's monitored bit.
            self.psb(false);
        }
        n
    }

    /// The steady state of the module notes, starting at time `clock`: the bytes that the next
    /// packets may take until a PSB is due (RTIT_PKT_CNT reaches the monitored bit after that
    /// many single bytes; at least 1). None when the tracer is not in it.
    fn steady_room(&self, clock: u64) -> Option<usize> {
        let events = self.msrs.events;
        let steady = !self.no_shortcuts
            && self.log.is_none()
            && self.bytes_log.is_none()
            && self.opts.internal_buffer.is_none()
            && !self.opts.errata.e3_psb_delayed
            && !self.psb_due
            && self.packet_en()
            && !self.overflow()
            && matches!(events.filter_event(), EventId::AlwaysOn | EventId::Reserved(_))
            && matches!(events.stop_event(), EventId::AlwaysOff | EventId::Reserved(_))
            && (1..TNT_FULL).contains(&self.msrs.tnt_buff.0)
            && clock >= self.tsc;
        if !steady {
            return None;
        }
        // §3.3.9: "a PSB is sent when the monitored bit is set" after Pkt_Cnt counts a packet's
        // bytes. From a count below it, one byte at a time reaches it after `m - r` bytes.
        let m = 1u32 << self.msrs.pkt_cnt.monitored_bit();
        let r = u32::from(self.msrs.pkt_cnt.pkt_cnt()) & (2 * m - 1);
        (r < m).then(|| (m - r) as usize)
    }

    /// One run of `user_blocks` up to the next PSB: returns how many blocks it took, and whether
    /// the last one's packet reached the PSB period (`room` bytes). `CYC`: RTIT_CTL[1] Cycle_Acc;
    /// `MTC`: RTIT_CTL[9] MTC_En.
    #[inline(never)]
    fn steady_segment<const CYC: bool, const MTC: bool, B: ExecutedBlock>(
        &mut self,
        prev: &mut &'static BlockEnd,
        blocks: &[B],
        clock: &mut u64,
        room: usize,
    ) -> (usize, bool) {
        let ctl = self.msrs.ctl;
        // RTIT_CTL[11] Cmprs_Ret cannot change during a run.
        let retc = ctl.cmprs_ret();
        let e6 = self.opts.errata.e6_cyc_minus_one;
        // With RTIT_CTL[MTC_En] the first clock value at which the watched TSC bits may differ
        // from the last MTC's (§4.2.12): `set_tsc` sends an MTC there if they do.
        let shift = ctl.mtc_shift();
        let mtc_header = super::encode::opcode::MTC | ctl.mtc_range();
        let mut mtc_last = self.mtc_last;
        let mut mtc_limit = if !MTC {
            u64::MAX
        } else if mtc_last == self.mtc_value() {
            ((self.tsc >> shift) + 1) << shift
        } else {
            0
        };
        // RTIT_CNTP as the clock moves: `cntp_at + (clock - anchor)` (it counts in the steady
        // state, Table 17) until a packet with a cycle count resets it (§4.2.14). In
        // cycle-accurate mode the clock at which RTIT_CNTP[21] would be set after a block
        // (FUP.PCC, §4.2.6) ends the run as well.
        let (mut anchor, mut cntp_at) = (self.tsc, self.msrs.cntp);
        let pcc_limit = |anchor: u64, cntp_at: u64| if CYC { (anchor + CNTP_MSB).saturating_sub(cntp_at) } else { u64::MAX };
        let mut limit = pcc_limit(anchor, cntp_at);
        // The cycle count packet that follows a packet generated at `clock` (E6: one less).
        let cyc = |anchor: u64, cntp_at: u64, clock: u64| {
            let cycles = (cntp_at + (clock - anchor)) as u32;
            super::encode::cyc_bytes(if e6 { cycles.saturating_sub(1) } else { cycles })
        };
        // Every byte of the run fits below the PSB period (a TIP's 8-byte store included).
        self.pending.reserve(room + SLACK);
        let start = self.pending.len();
        // SAFETY: `room + SLACK` bytes of spare capacity were reserved above; the run stores at
        // most `room` bytes (the checks below) plus stores of at most 8 bytes that start below
        // `room`, and `pending` is not touched again until `set_len` below.
        let out = unsafe { self.pending.as_mut_ptr().add(start) };
        let mut tnt = self.msrs.tnt_buff.0;
        let mut last_call = self.msrs.last_call_nlip.0;
        let mut last_lip = self.msrs.last_lip;
        let (mut p, mut c) = (*prev, *clock);
        let (mut used, mut packets, mut rets) = (0usize, 0u64, 0u64);
        let mut psb = false;
        let mut n = 0;
        // The block at `n` is explained: the MTC its clock calls for (before its own packets, and
        // with a cycle count of its own), unless the MTC and the `$after` bytes the block sends
        // next reach the PSB period (then the PSB falls between them: the general path).
        macro_rules! mtc {
            ($next_clock:expr, $after:expr) => {
                if MTC && $next_clock >= mtc_limit {
                    let ticks = $next_clock >> shift;
                    let v = ticks as u8;
                    if v != mtc_last {
                        let (cyc_bytes, cyc_len) = if CYC { cyc(anchor, cntp_at, $next_clock) } else { ([0; 3], 0) };
                        if used + 2 + cyc_len + $after >= room {
                            break;
                        }
                        // SAFETY: below `room` (see `out`).
                        unsafe {
                            out.add(used).cast::<[u8; 2]>().write_unaligned([mtc_header, v]);
                            if CYC {
                                out.add(used + 2).cast::<[u8; 3]>().write_unaligned(cyc_bytes);
                                (anchor, cntp_at) = ($next_clock, 0);
                                limit = pcc_limit(anchor, cntp_at);
                            }
                        }
                        used += 2 + cyc_len;
                        packets += 1;
                        mtc_last = v;
                    }
                    mtc_limit = (ticks + 1) << shift;
                }
            };
        }
        while let Some(b) = blocks.get(n) {
            let next_clock = c + b.n_insns();
            if CYC && next_clock >= limit {
                break;
            }
            let pc = b.pc();
            let d = &p.direct;
            if d.conditional {
                // Row 2: one TNT result, taken iff `pc` is not the NLIP; not explained if it is
                // not the target either.
                let taken = pc != d.fall;
                if taken & (pc != d.target) {
                    break;
                }
                mtc!(next_clock, 0);
                tnt = (tnt << 1) | u64::from(taken);
            } else if pc == d.target {
                // Rows 1, 6, 7: nothing but a direct CALL's NLIP.
                mtc!(next_clock, 0);
                if retc & (p.rtit_call != 0) {
                    last_call = p.rtit_call;
                }
                (n, c, p) = (n + 1, next_clock, b.end());
                continue;
            } else if p.compressible_ret & retc && last_call == RtitLastCallNlip::holding(pc).0 {
                // §4.2.3.2: a Taken result instead of the TIP; RTIT_LAST_LIP untouched.
                mtc!(next_clock, 0);
                rets += 1;
                tnt = (tnt << 1) | 1;
            } else if p.indirect {
                // Rows 11, 13, 14 (and a RET that does not compress): the partial TNT (no cycle
                // count), then the TIP (with one), unless their bytes reach the PSB period.
                // Table 18 rows 1 and 2 (LIP[47:16] as in RTIT_LAST_LIP, not all zero: LIP[15:0]
                // alone) without the general compression.
                let upper = (pc & LIP_MASK) >> 16;
                let lip = if last_lip == upper | LAST_LIP_VALID && upper != 0 {
                    Lip { cnt: 0, zext: false, payload: pc & 0xFFFF }
                } else {
                    LastLip::from_msr(last_lip).compress(pc)
                };
                let flush = usize::from(tnt != 1);
                let len = 1 + lip.payload_len();
                // (After an MTC with a cycle count, the TIP's count is 0: one byte.)
                mtc!(next_clock, flush + len + usize::from(CYC));
                let (cyc_bytes, cyc_len) = if CYC { cyc(anchor, cntp_at, next_clock) } else { ([0; 3], 0) };
                if used + flush + len + cyc_len >= room {
                    break;
                }
                if retc & (p.rtit_call != 0) {
                    last_call = p.rtit_call;
                }
                // SAFETY: `used + flush + len + cyc_len < room`; the 8-byte payload store starts
                // below `room` (see `out`).
                unsafe {
                    *out.add(used) = tnt as u8;
                    used += flush;
                    *out.add(used) = tip_header(lip);
                    out.add(used + 1).cast::<[u8; 8]>().write_unaligned(lip.payload.to_le_bytes());
                    if CYC {
                        out.add(used + len).cast::<[u8; 3]>().write_unaligned(cyc_bytes);
                    }
                }
                used += len + cyc_len;
                packets += 1 + flush as u64;
                tnt = 1;
                // RTIT_LAST_LIP takes LIP[47:16] of every TIP (§3.3.7).
                last_lip = upper | LAST_LIP_VALID;
                (n, c, p) = (n + 1, next_clock, b.end());
                if CYC {
                    (anchor, cntp_at) = (c, 0);
                    limit = pcc_limit(anchor, cntp_at);
                }
                continue;
            } else {
                break;
            }
            (n, c, p) = (n + 1, next_clock, b.end());
            if tnt >= TNT_FULL {
                // SAFETY: `used < room` (it reaches `room` only here, which ends the run); the
                // cycle count's 3-byte store starts at most at `room` (see `out`).
                unsafe { *out.add(used) = tnt as u8 };
                used += 1;
                packets += 1;
                tnt = 1;
                if CYC {
                    // A full TNT carries a cycle count (§4.2.14).
                    let (bytes, k) = cyc(anchor, cntp_at, c);
                    unsafe { out.add(used).cast::<[u8; 3]>().write_unaligned(bytes) };
                    used += k;
                    (anchor, cntp_at) = (c, 0);
                    limit = pcc_limit(anchor, cntp_at);
                }
                if used >= room {
                    psb = true;
                    break;
                }
            }
        }
        // SAFETY: the first `used` bytes of the spare capacity were initialized above.
        unsafe { self.pending.set_len(start + used) };
        self.msrs.tnt_buff = RtitTntBuff(tnt);
        self.msrs.last_call_nlip = RtitLastCallNlip(last_call);
        self.msrs.last_lip = last_lip;
        let cnt = self.msrs.pkt_cnt.pkt_cnt();
        self.msrs.pkt_cnt.set_pkt_cnt(cnt.wrapping_add(used as u16));
        self.stats.packets += packets;
        self.stats.bytes += used as u64;
        self.stats.compressed_rets += rets;
        if n > 0 {
            // `set_tsc(c)`, block by block: RTIT_CNTP counts (TriggerEn, ContextEn and FilterEn
            // hold), and the watched bits did not change with MTC_En.
            self.msrs.cntp = (cntp_at + (c - anchor)) & CNTP_MASK;
            self.tsc = c;
            // (TriggerEn holds: `set_tsc` keeps the watched bits whether or not MTC_En.)
            self.mtc_last = if MTC { mtc_last } else { self.mtc_value() };
        }
        (*prev, *clock) = (p, c);
        (n, psb)
    }
}
