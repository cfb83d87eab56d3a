//! Property tests with a small deterministic PRNG (no extra crates; every failure names its
//! seed, so it replays exactly):
//!
//! - random packet streams of every packet kind and every IP compression encode, decode back to
//!   the same packets at the same offsets, and their IPs decompress (with last-IP reset at PSB
//!   and OVF) to the IPs that were compressed;
//! - random valid MSR configurations (written through `RtitMsrs`, so each one is accepted
//!   without #GP) with random branch sequences: the tracer's bytes, decoded with the core's
//!   packet decoder and last-IP, replay to the same branch outcomes — every conditional's
//!   direction, every indirect and far target, every RET (compressed against a decoder-side call
//!   stack cleared at PSB, or a TIP), the FUP/TIP of interrupts, MODE.Exec and PIP after context
//!   changes — and nothing is left over.

use pttrace_core::insn_class::{BranchKind, FarKind};
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::decode::PacketDecoder;
use pttrace_core::pt::encode::{encoded_len, try_encode};
use pttrace_core::pt::last_ip::LastIp;
use pttrace_core::pt::msr::{RtitMsrs, WriteEffect, IA32_RTIT_ADDR0_A, IA32_RTIT_ADDR0_B, IA32_RTIT_CR3_MATCH, IA32_RTIT_CTL};
use pttrace_core::pt::packet::{ExecMode, IpCompression, Packet};
use pttrace_core::pt::rtit_ctl::RtitCtl;
use pttrace_core::pt::tracer::{AsyncKind, Context, TraceConfig, Tracer};

/// splitmix64: tiny, good enough for test-case generation.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

const COMPRESSIONS: [IpCompression; 6] = [
    IpCompression::Suppressed,
    IpCompression::Update16,
    IpCompression::Update32,
    IpCompression::Sext48,
    IpCompression::Update48,
    IpCompression::Full,
];

const MODES: [ExecMode; 3] = [ExecMode::Bit16, ExecMode::Bit32, ExecMode::Bit64];

/// An IP near `last` (so the short compressions apply), canonical, or anything.
fn random_ip(rng: &mut Rng, last: u64) -> u64 {
    match rng.below(6) {
        0 => last ^ rng.below(1 << 16),
        1 => last ^ rng.below(1 << 32),
        2 => last ^ rng.below(1 << 48),
        3 => (((rng.next() << 16) as i64) >> 16) as u64, // canonical 48-bit
        4 => rng.below(1 << 16),
        _ => rng.next(),
    }
}

// ---------------------------------------------------------------------------------------------
// encode -> decode
// ---------------------------------------------------------------------------------------------

/// Which IP-packet kind (0 TIP, 1 TIP.PGE, 2 TIP.PGD, 3 FUP) used which compression.
type Seen = [[bool; 6]; 4];

/// A random valid packet; IP packets compress a random IP with a random compression against the
/// encoder's last-IP (falling back to the best one when the choice cannot carry the IP) and
/// record the IP a decoder must reconstruct.
fn random_packet(rng: &mut Rng, enc: &mut LastIp, expect_ips: &mut Vec<Option<u64>>, seen: &mut Seen) -> Packet {
    let kind = rng.below(26);
    if kind < 4 {
        let ip = random_ip(rng, enc.value());
        let c = rng.pick(&COMPRESSIONS);
        let payload = match enc.compress_with(ip, c) {
            Some(p) => p,
            None => enc.compress(ip),
        };
        expect_ips.push((payload.compression != IpCompression::Suppressed).then_some(ip));
        let ci = COMPRESSIONS.iter().position(|&x| x == payload.compression).unwrap();
        seen[kind as usize][ci] = true;
        return match kind {
            0 => Packet::Tip(payload),
            1 => Packet::TipPge(payload),
            2 => Packet::TipPgd(payload),
            _ => Packet::Fup(payload),
        };
    }
    match kind {
        4 => Packet::Pad,
        5 => {
            enc.reset();
            Packet::Psb
        }
        6 => Packet::PsbEnd,
        7 => {
            enc.reset();
            Packet::Ovf
        }
        8 => Packet::TraceStop,
        9 => {
            let count = 1 + rng.below(6) as u8;
            Packet::Tnt { bits: (rng.next() as u8) & ((1 << count) - 1), count }
        }
        10 => {
            let count = 1 + rng.below(47) as u8;
            Packet::TntLong { bits: rng.next() & ((1 << count) - 1), count }
        }
        11 => Packet::ModeExec { mode: rng.pick(&MODES), if_flag: rng.chance(50) },
        12 => Packet::ModeTsx { in_tx: rng.chance(50), tx_abort: rng.chance(50) },
        13 => Packet::Pip { cr3: rng.next() & ((1 << 52) - 1) & !0x1F, nr: rng.chance(50) },
        14 => Packet::Cbr { ratio: rng.next() as u8 },
        15 => Packet::Tsc { tsc: rng.next() >> 8 },
        16 => Packet::Mtc { ctc: rng.next() as u8 },
        17 => Packet::Tma { ctc: rng.next() as u16, fast_counter: rng.below(1 << 9) as u16 },
        19 => Packet::Exstop { ip: rng.chance(50) },
        20 => Packet::Mwait { hints: rng.next() as u32, ext: (rng.next() >> 32) as u32 },
        21 => Packet::Pwre { state: rng.below(16) as u8, sub_state: rng.below(16) as u8, hw: rng.chance(50) },
        22 => Packet::Pwrx { last: rng.below(16) as u8, deepest: rng.below(16) as u8, wake: rng.below(16) as u8 },
        23 => Packet::Cfe { ip: rng.chance(50), kind: rng.below(32) as u8, vector: rng.next() as u8 },
        24 => Packet::Evd { kind: rng.below(32) as u8, payload: rng.next() },
        _ => Packet::Cyc { value: rng.next() >> rng.below(64) },
    }
}

#[test]
fn random_packet_streams_of_every_kind_and_ip_compression_encode_then_decode_to_the_same_packets() {
    let mut seen: Seen = [[false; 6]; 4];
    for seed in 0..3000u64 {
        let mut rng = Rng(seed);
        let mut enc = LastIp::new();
        let mut expect_ips = Vec::new();
        let n = 1 + rng.below(80) as usize;
        let packets: Vec<Packet> = (0..n).map(|_| random_packet(&mut rng, &mut enc, &mut expect_ips, &mut seen)).collect();
        let mut bytes = Vec::new();
        let mut offsets = Vec::new();
        for p in &packets {
            offsets.push(bytes.len());
            try_encode(p, &mut bytes).unwrap_or_else(|e| panic!("seed {seed}: {p:?} does not encode: {e}"));
            assert_eq!(bytes.len() - offsets.last().unwrap(), encoded_len(p), "seed {seed}: encoded_len of {p:?}");
        }
        let decoded: Vec<_> = PacketDecoder::new(&bytes)
            .map(|d| d.unwrap_or_else(|e| panic!("seed {seed}: {e} in {bytes:02x?}")))
            .collect();
        assert_eq!(decoded.len(), packets.len(), "seed {seed}");
        let mut dec = LastIp::new();
        let mut got_ips = Vec::new();
        for ((d, p), off) in decoded.iter().zip(&packets).zip(&offsets) {
            assert_eq!((d.offset, d.packet), (*off, *p), "seed {seed}");
            match d.packet {
                Packet::Psb | Packet::Ovf => dec.reset(),
                Packet::Tip(ip) | Packet::TipPge(ip) | Packet::TipPgd(ip) | Packet::Fup(ip) => {
                    got_ips.push(dec.decompress(ip));
                }
                _ => {}
            }
        }
        assert_eq!(got_ips, expect_ips, "seed {seed}: IPs after last-IP decompression");
    }
    for (k, row) in seen.iter().enumerate() {
        assert!(row.iter().all(|&s| s), "IP packet kind {k} missed a compression: {row:?}");
    }
}

#[test]
fn every_ip_compression_of_random_ips_against_random_last_ips_round_trips_through_the_wire() {
    let mut rng = Rng(0x5eed);
    for _ in 0..20_000 {
        let last = rng.next();
        let ip = random_ip(&mut rng, last);
        for c in COMPRESSIONS.into_iter().skip(1) {
            let mut enc = LastIp::new();
            enc.compress_with(last, IpCompression::Full).unwrap();
            let Some(p) = enc.compress_with(ip, c) else {
                // Only a compression that cannot carry the IP is refused, and Full carries any.
                assert!(c != IpCompression::Full && !enc.can_represent(ip, c), "{ip:#x} as {c:?}");
                assert_eq!(enc.value(), last, "a refused compression changed last-IP");
                continue;
            };
            let mut bytes = Vec::new();
            try_encode(&Packet::Tip(p), &mut bytes).unwrap();
            let d = PacketDecoder::new(&bytes).next().unwrap().unwrap();
            let Packet::Tip(q) = d.packet else { panic!("{d:?}") };
            let mut dec = LastIp::new();
            dec.compress_with(last, IpCompression::Full).unwrap();
            assert_eq!(dec.decompress(q), Some(ip), "{ip:#x} as {c:?} against {last:#x}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// MSR configuration + branches -> tracer -> decoder
// ---------------------------------------------------------------------------------------------

/// One retired event the generator produced, with what a decoder must recover from the trace.
#[derive(Clone, Copy, Debug)]
enum Event {
    /// Conditional branch: its direction.
    Cond { taken: bool },
    /// Direct jump or call (no packet); `push` = the decoder pushes this return address.
    Direct { push: Option<u64> },
    /// Indirect jump/call: TIP(target); an indirect call pushes `push`.
    Indirect { target: u64, push: Option<u64> },
    /// Near RET to `target`.
    Ret { target: u64 },
    /// Far transfer into `to`: PIP / MODE.Exec as needed, then TIP(target).
    Far { target: u64, to: Context },
    /// Interrupt: FUP(resume), then TIP(handler).
    Interrupt { resume: u64, handler: u64, to: Context },
    /// MOV CR3 (CR3 filter off): PIP when OS = 1.
    MovCr3 { cr3: u64 },
}

/// A random configuration every profile rule accepts, written through the MSR file.
fn random_config(rng: &mut Rng, caps: &PtCaps, ctx: &Context) -> (RtitMsrs, TraceConfig) {
    let mut msrs = RtitMsrs::default();
    let mut ctl = RtitCtl::default();
    ctl.set_branch_en(true);
    // The current CPL must be traced; the other one sometimes.
    if ctx.cpl == 0 {
        ctl.set_os(true).set_user(rng.chance(50));
    } else {
        ctl.set_user(true).set_os(rng.chance(50));
    }
    ctl.set_topa(caps.topa && rng.chance(50) || !caps.single_range);
    ctl.set_tsc_en(rng.chance(50)).set_dis_retc(rng.chance(25));
    let from_bitmap = |rng: &mut Rng, bitmap: u16| loop {
        let e = rng.below(16) as u8;
        if bitmap & (1 << e) != 0 {
            break e;
        }
    };
    if caps.mtc && rng.chance(50) {
        let f = from_bitmap(rng, caps.mtc_period_bitmap);
        ctl.set_mtc_en(true).set_mtc_freq(f);
    }
    if caps.psb_cyc {
        if rng.chance(50) {
            let t = from_bitmap(rng, caps.cyc_thresh_bitmap);
            ctl.set_cyc_en(true).set_cyc_thresh(t);
        }
        // Small PSB periods so PSB+ lands between calls and their RETs.
        let p = from_bitmap(rng, caps.psb_freq_bitmap & 0x7);
        ctl.set_psb_freq(p);
    }
    if caps.cr3_filter && rng.chance(30) {
        ctl.set_cr3_filter(true);
        let r = msrs.write(IA32_RTIT_CR3_MATCH, ctx.cr3 & !0x1F, caps);
        assert_eq!(r, Ok(WriteEffect::Plain), "CR3_MATCH");
    }
    if caps.ip_filter && caps.num_addr_ranges > 0 && rng.chance(30) {
        // A filter range covering every address: FilterEn stays 1.
        assert_eq!(msrs.write(IA32_RTIT_ADDR0_A, 0, caps), Ok(WriteEffect::Plain));
        assert_eq!(msrs.write(IA32_RTIT_ADDR0_B, u64::MAX, caps), Ok(WriteEffect::Plain));
        ctl.set_addr_cfg(0, pttrace_core::pt::rtit_ctl::AddrCfg::Filter);
    }
    ctl.set_trace_en(true);
    let r = msrs.write(IA32_RTIT_CTL, ctl.0, caps);
    assert_eq!(r, Ok(WriteEffect::TraceEnabled), "CTL {:#x} on {caps:?}", ctl.0);
    let cfg = TraceConfig {
        ctl: msrs.ctl,
        cr3_match: msrs.cr3_match,
        addr: msrs.addr,
        num_ranges: caps.num_addr_ranges as usize,
        cbr: TraceConfig::default().cbr,
    };
    (msrs, cfg)
}

/// Code addresses in a few areas (user, library, kernel), so every compression occurs.
fn code_ip(rng: &mut Rng) -> u64 {
    match rng.below(8) {
        0..=3 => 0x40_0000 + rng.below(0x10_0000),
        4 | 5 => 0x7fff_f000_0000 + rng.below(0x1000_0000),
        6 => 0xffff_ffff_8000_0000 + rng.below(0x100_0000),
        _ => (((rng.next() << 16) as i64) >> 16) as u64,
    }
}

/// Decoded items a flow decoder consumes, in stream order.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Item {
    Tnt(bool),
    Tip(u64),
    Pge(u64),
    Pgd(Option<u64>),
    Fup(u64),
    Psb,
    PsbEnd,
    Mode(ExecMode),
    Pip(u64),
}

fn items(bytes: &[u8], seed: u64) -> Vec<Item> {
    let mut last = LastIp::new();
    let mut out = Vec::new();
    for d in PacketDecoder::new(bytes) {
        let d = d.unwrap_or_else(|e| panic!("seed {seed}: tracer output does not decode: {e}"));
        match d.packet {
            Packet::Psb => {
                last.reset();
                out.push(Item::Psb);
            }
            Packet::PsbEnd => out.push(Item::PsbEnd),
            Packet::Ovf => panic!("seed {seed}: OVF from the tracer"),
            Packet::Tnt { bits, count } => out.extend((0..count).rev().map(|i| Item::Tnt(bits >> i & 1 != 0))),
            Packet::TntLong { bits, count } => out.extend((0..count).rev().map(|i| Item::Tnt(bits >> i & 1 != 0))),
            Packet::Tip(p) => out.push(Item::Tip(last.decompress(p).expect("TIP with an IP"))),
            Packet::TipPge(p) => out.push(Item::Pge(last.decompress(p).expect("TIP.PGE with an IP"))),
            Packet::TipPgd(p) => out.push(Item::Pgd(last.decompress(p))),
            Packet::Fup(p) => out.push(Item::Fup(last.decompress(p).expect("FUP with an IP"))),
            Packet::ModeExec { mode, .. } => out.push(Item::Mode(mode)),
            Packet::Pip { cr3, .. } => out.push(Item::Pip(cr3)),
            Packet::TraceStop => panic!("seed {seed}: TraceStop without a TraceStop range"),
            Packet::ModeTsx { .. } => panic!("seed {seed}: MODE.TSX from the tracer"),
            Packet::Pad | Packet::Cbr { .. } | Packet::Tsc { .. } | Packet::Mtc { .. } | Packet::Tma { .. } | Packet::Cyc { .. } => {}
            Packet::Exstop { .. } | Packet::Mwait { .. } | Packet::Pwre { .. } | Packet::Pwrx { .. } => {
                panic!("seed {seed}: a power event packet without a HLT")
            }
            Packet::Cfe { .. } | Packet::Evd { .. } => panic!("seed {seed}: an event trace packet without EventEn"),
        }
    }
    out
}

/// Replays `events` against the decoded items like a flow decoder with a code image would.
struct Replay<'a> {
    items: &'a [Item],
    pos: usize,
    in_psb: bool,
    ret_stack: Vec<u64>,
    ctx: Context,
    seed: u64,
    tnt_bits: u64,
    compressed: u64,
}

impl Replay<'_> {
    /// The next item that carries a branch outcome; PSB+ contents are skipped (PSB empties the
    /// RET-compression stack, as a decoder syncing there has none), MODE.Exec and PIP outside
    /// PSB+ must match the context the generator switched to.
    fn next(&mut self, what: &str) -> Item {
        loop {
            let Some(&it) = self.items.get(self.pos) else {
                panic!("seed {}: trace ended while expecting {what}", self.seed);
            };
            self.pos += 1;
            match it {
                Item::Psb => {
                    self.in_psb = true;
                    self.ret_stack.clear();
                }
                Item::PsbEnd => self.in_psb = false,
                _ if self.in_psb => {}
                Item::Mode(m) => assert_eq!(m, self.ctx.mode, "seed {}: MODE.Exec before {what}", self.seed),
                Item::Pip(cr3) => assert_eq!(cr3, self.ctx.cr3 & !0x1F, "seed {}: PIP before {what}", self.seed),
                other => return other,
            }
        }
    }

    /// MOV CR3 with OS = 1: the next non-PSB+ item is PIP(new CR3).
    fn expect_pip(&mut self) {
        loop {
            let Some(&it) = self.items.get(self.pos) else { panic!("seed {}: no PIP after MOV CR3", self.seed) };
            self.pos += 1;
            match it {
                Item::Psb => {
                    self.in_psb = true;
                    self.ret_stack.clear();
                }
                Item::PsbEnd => self.in_psb = false,
                _ if self.in_psb => {}
                Item::Pip(cr3) => {
                    assert_eq!(cr3, self.ctx.cr3 & !0x1F, "seed {}: PIP after MOV CR3", self.seed);
                    return;
                }
                other => panic!("seed {}: {other:?} where MOV CR3's PIP was due", self.seed),
            }
        }
    }

    fn expect(&mut self, want: Item, what: &str) {
        let got = self.next(what);
        assert_eq!(got, want, "seed {}: {what} (item {})", self.seed, self.pos - 1);
        if let Item::Tnt(_) = got {
            self.tnt_bits += 1;
        }
    }

    fn ret(&mut self, target: u64, dis_retc: bool) {
        match self.next("RET") {
            Item::Tnt(true) if !dis_retc => {
                self.tnt_bits += 1;
                self.compressed += 1;
                let top = self.ret_stack.pop();
                assert_eq!(top, Some(target), "seed {}: compressed RET", self.seed);
            }
            Item::Tip(t) => assert_eq!(t, target, "seed {}: RET target", self.seed),
            other => panic!("seed {}: RET to {target:#x} decoded as {other:?}", self.seed),
        }
    }

    /// A CALL retired after a PSB+ that is next in the stream: the decoder reaches that PSB
    /// (and empties its stack) before it handles the CALL.
    fn absorb_psb(&mut self) {
        while self.items.get(self.pos) == Some(&Item::Psb) {
            self.ret_stack.clear();
            while let Some(&it) = self.items.get(self.pos) {
                self.pos += 1;
                if it == Item::PsbEnd {
                    break;
                }
            }
        }
    }

    fn push(&mut self, ret: u64) {
        self.absorb_psb();
        // Hardware and libipt keep 64 entries and drop the oldest.
        if self.ret_stack.len() == 64 {
            self.ret_stack.remove(0);
        }
        self.ret_stack.push(ret);
    }

    fn no_outcomes_left(&mut self) {
        while let Some(&it) = self.items.get(self.pos) {
            self.pos += 1;
            match it {
                Item::Psb => self.in_psb = true,
                Item::PsbEnd => self.in_psb = false,
                _ if self.in_psb => {}
                other => panic!("seed {}: trailing {other:?}", self.seed),
            }
        }
    }
}

fn caps_under_test() -> [PtCaps; 3] {
    [
        PtCaps::SKYLAKE,
        PtCaps::MINIMAL,
        PtCaps { num_addr_ranges: 4, psb_pmi_preserve: true, ptwrite: true, max_phys_addr: 46, ..PtCaps::SKYLAKE },
    ]
}

#[test]
fn random_valid_msr_configurations_and_branch_sequences_decode_to_the_same_branch_outcomes() {
    let mut totals = (0u64, 0u64, 0u64); // TNT bits, compressed RETs, PSBs
    for seed in 0..400u64 {
        let mut rng = Rng(seed.wrapping_mul(0x1000_0000_01B3) ^ 0xC0FFEE);
        let caps = rng.pick(&caps_under_test());
        let mut ctx = Context { cpl: rng.pick(&[0u8, 3]), cr3: rng.below(1 << 40) << 12, mode: ExecMode::Bit64 };
        let (msrs, cfg) = random_config(&mut rng, &caps, &ctx);
        let ctl = msrs.ctl;
        let cpls: Vec<u8> = [(ctl.os(), 0u8), (ctl.user(), 3u8)].iter().filter(|(on, _)| *on).map(|&(_, c)| c).collect();

        let mut tsc = rng.next() >> 20;
        let mut t = Tracer::new(cfg, ctx);
        t.set_tsc(tsc);
        let mut ip = code_ip(&mut rng);
        t.write_ctl(ip.wrapping_sub(2), ip, ctl);
        let (ctx0, ip0) = (ctx, ip);

        let mut program_stack: Vec<u64> = Vec::new();
        let mut events = Vec::new();
        let n = 50 + rng.below(1500);
        for _ in 0..n {
            tsc += rng.below(3000);
            t.set_tsc(tsc);
            let len = 1 + rng.below(7);
            let nlip = ip.wrapping_add(len);
            let near = ip.wrapping_add(rng.below(0x2000)).wrapping_sub(0x1000);
            let (ev, next) = match rng.below(100) {
                0..=34 => {
                    let taken = rng.chance(60);
                    let next = if taken { near } else { nlip };
                    t.branch(ip, nlip, BranchKind::Conditional { target: near }, next);
                    (Event::Cond { taken: next != nlip }, next)
                }
                35..=41 => {
                    t.branch(ip, nlip, BranchKind::DirectJump { target: near }, near);
                    (Event::Direct { push: None }, near)
                }
                42..=56 => {
                    // A CALL with displacement 0 (call next; pop) is not a call for compression.
                    let target = if rng.chance(5) { nlip } else { code_ip(&mut rng) };
                    program_stack.push(nlip);
                    t.branch(ip, nlip, BranchKind::DirectCall { target }, target);
                    (Event::Direct { push: (target != nlip).then_some(nlip) }, target)
                }
                57..=61 => {
                    let target = code_ip(&mut rng);
                    t.branch(ip, nlip, BranchKind::IndirectJump, target);
                    (Event::Indirect { target, push: None }, target)
                }
                62..=68 => {
                    let target = code_ip(&mut rng);
                    program_stack.push(nlip);
                    t.branch(ip, nlip, BranchKind::IndirectCall, target);
                    (Event::Indirect { target, push: Some(nlip) }, target)
                }
                69..=86 => {
                    // Mostly to the matching call site; sometimes a longjmp-like RET elsewhere.
                    let target = match program_stack.pop() {
                        Some(r) if rng.chance(90) => r,
                        _ => code_ip(&mut rng),
                    };
                    t.branch(ip, nlip, BranchKind::Return, target);
                    (Event::Ret { target }, target)
                }
                87..=91 => {
                    let target = code_ip(&mut rng);
                    let mut to = Context { cpl: rng.pick(&cpls), mode: rng.pick(&MODES), ..ctx };
                    if !ctl.cr3_filter() && rng.chance(50) {
                        to.cr3 = rng.below(1 << 40) << 12;
                    }
                    let kind = rng.pick(&[FarKind::Syscall, FarKind::Sysret, FarKind::Iret, FarKind::FarJmp]);
                    t.far_transfer(kind, target, to);
                    ctx = to;
                    (Event::Far { target, to }, target)
                }
                92..=95 => {
                    let handler = code_ip(&mut rng);
                    let to = Context { cpl: rng.pick(&cpls), ..ctx };
                    t.async_event(AsyncKind::Interrupt { resume_ip: ip }, handler, to);
                    ctx = to;
                    program_stack.clear();
                    (Event::Interrupt { resume: ip, handler, to }, handler)
                }
                96..=97 if !ctl.cr3_filter() => {
                    let cr3 = rng.below(1 << 40) << 12;
                    t.mov_cr3(nlip, cr3);
                    ctx.cr3 = cr3;
                    (Event::MovCr3 { cr3 }, nlip)
                }
                _ => {
                    t.branch(ip, nlip, BranchKind::None, nlip);
                    (Event::Direct { push: None }, nlip)
                }
            };
            events.push(ev);
            ip = next;
        }
        // WRMSR clearing TraceEn at `ip`: FUP(ip), TIP.PGD.
        let mut off = ctl;
        off.set_trace_en(false);
        t.write_ctl(ip, ip.wrapping_add(2), off);
        t.finish();
        let stats = t.stats();
        let bytes = t.take_output();
        assert_eq!(stats.bytes, bytes.len() as u64, "seed {seed}");

        let its = items(&bytes, seed);
        let mut r = Replay {
            items: &its,
            pos: 0,
            in_psb: false,
            ret_stack: Vec::new(),
            ctx: ctx0,
            seed,
            tnt_bits: 0,
            compressed: 0,
        };
        // Enable: PSB+, then MODE.Exec and TIP.PGE at the first instruction.
        r.expect(Item::Pge(ip0), "TIP.PGE at enable");
        for ev in &events {
            match *ev {
                Event::Cond { taken } => r.expect(Item::Tnt(taken), "conditional branch"),
                Event::Direct { push } => {
                    if let Some(a) = push {
                        r.push(a);
                    }
                }
                Event::Indirect { target, push } => {
                    if let Some(a) = push {
                        r.push(a);
                    }
                    r.expect(Item::Tip(target), "indirect branch");
                }
                Event::Ret { target } => r.ret(target, ctl.dis_retc()),
                Event::Far { target, to } => {
                    r.ctx = to;
                    r.expect(Item::Tip(target), "far transfer");
                }
                Event::Interrupt { resume, handler, to } => {
                    r.ctx = to;
                    r.expect(Item::Fup(resume), "interrupt FUP");
                    r.expect(Item::Tip(handler), "interrupt TIP");
                }
                Event::MovCr3 { cr3 } => {
                    r.ctx.cr3 = cr3;
                    if ctl.os() {
                        r.expect_pip();
                    }
                }
            }
        }
        r.expect(Item::Fup(ip), "FUP at the WRMSR clearing TraceEn");
        r.expect(Item::Pgd(None), "TIP.PGD at disable");
        r.no_outcomes_left();
        assert_eq!(r.tnt_bits, stats.tnt_bits, "seed {seed}: TNT bits");
        assert_eq!(r.compressed, stats.compressed_rets, "seed {seed}: compressed RETs");
        totals.0 += r.tnt_bits;
        totals.1 += r.compressed;
        totals.2 += stats.psbs;
    }
    eprintln!("TNT bits, compressed RETs, PSBs: {totals:?}");
    // The generator really exercised TNT, RET compression and PSB insertion.
    assert!(totals.0 > 10_000 && totals.1 > 1_000 && totals.2 > 400, "{totals:?}");
}
