//! Round trips: every RTIT packet and LIP compression through encoder and parser, and the
//! tracer's output through the flow decoder back to the instruction sequence a synthetic program
//! executed (the ground truth comes from the test's own executor, not from the tracer).

/// Every test sits in `rtit` so `cargo test rtit` selects them.
mod rtit {
    use std::collections::BTreeMap;

    use pttrace_core::guest_mem::SparseMemory;
    use pttrace_core::insn_class::{classify, BranchKind, FarKind};
    use pttrace_core::pt::packet::ExecMode;
    use pttrace_core::pt::tracer::{AsyncKind, Context};
    use pttrace_core::rtit::decode::{instructions, parse_all, reconstruct, FlowEvent, FlowOptions};
    use pttrace_core::rtit::encode::{encode, try_encode};
    use pttrace_core::rtit::lip::{LastLip, LIP_MASK};
    use pttrace_core::rtit::msr::*;
    use pttrace_core::rtit::packet::{FupKind, Lip, Packet};
    use pttrace_core::rtit::{RtitOptions, RtitTracer};

    /// xorshift64*: deterministic pseudo-random numbers.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    #[test]
    fn every_packet_and_lip_form_round_trips_with_and_without_cycle_counts() {
        let kinds = [FupKind::Pge, FupKind::Pgd, FupKind::BuffOvf, FupKind::Pcc, FupKind::Far];
        let lips = [
            Lip { cnt: 0, zext: false, payload: 0xBEEF },
            Lip { cnt: 0, zext: true, payload: 0x0001 },
            Lip { cnt: 1, zext: false, payload: 0x1234_5678 },
            Lip { cnt: 1, zext: true, payload: 0xFFFF_FFFF },
            Lip { cnt: 2, zext: false, payload: 0xFFFF_8000_0000 },
        ];
        let mut packets = Vec::new();
        for count in 1..=6u8 {
            for bits in [0u8, (1 << count) - 1, 0b10_1010 & ((1 << count) - 1)] {
                packets.push(Packet::Tnt { bits, count });
            }
        }
        for lip in lips {
            packets.push(Packet::Tip(lip));
            for kind in kinds {
                packets.push(Packet::Fup { kind, lip });
            }
        }
        packets.extend([
            Packet::Psb,
            Packet::TraceStop,
            Packet::Pip { cr3: 0xFF_FFFF_F000, pg: true },
            Packet::Pip { cr3: 0, pg: false },
            Packet::Mtc { range: 3, tsc: 0xFF },
            Packet::Sts { acbr: 0x3F, ecbr: 0x2A, tsc: 0xAB_CDEF_0123 },
        ]);
        for cycle_acc in [false, true] {
            let mut stream = Vec::new();
            let mut cycles = [0u32, 1, 63, 64, 0x3FFF, 0x4000, 0x3F_FFFF].iter().cycle();
            for p in &packets {
                stream.push(*p);
                if cycle_acc && p.carries_cycle_count() {
                    stream.push(Packet::Cyc { cycles: *cycles.next().unwrap() });
                }
            }
            let mut bytes = Vec::new();
            for p in &stream {
                try_encode(p, &mut bytes).unwrap();
            }
            let back: Vec<Packet> = parse_all(&bytes, cycle_acc).unwrap().into_iter().map(|d| d.packet).collect();
            assert_eq!(back, stream, "cycle_acc {cycle_acc}");
        }
    }

    #[test]
    fn lip_compression_round_trips_on_random_address_sequences() {
        let mut rng = Rng(0x1234_5678_9ABC_DEF1);
        let pools = [0x0000_0000_0040_0000u64, 0x0000_7FFF_F7A0_0000, 0xFFFF_FFFF_8100_0000, 0xFFFF_8880_0000_0000];
        for _ in 0..200 {
            let mut enc = LastLip::default();
            let mut dec = LastLip::default();
            for _ in 0..50 {
                let base = pools[rng.below(4) as usize];
                let width = 8 * rng.below(4) as u32 + 4;
                let ip = base.wrapping_add(rng.below(1 << width));
                if rng.below(20) == 0 {
                    // PSB on both sides.
                    enc = LastLip::default();
                    dec = LastLip::default();
                }
                let lip = enc.compress_update(ip);
                let mut b = Vec::new();
                encode(&Packet::Tip(lip), &mut b);
                assert_eq!(b.len(), 1 + lip.payload_len());
                let parsed = parse_all(&b, false).unwrap()[0].packet;
                let Packet::Tip(back) = parsed else { panic!("{parsed:?}") };
                assert_eq!(dec.expand_update(back), Ok(ip & LIP_MASK));
            }
        }
    }

    // ---------------------------------------------------------------------------------------------
    // Synthetic programs
    // ---------------------------------------------------------------------------------------------

    #[derive(Clone, Copy)]
    enum I {
        Label(&'static str),
        Nop,
        Mov,
        Jcc(&'static str),
        Jmp(&'static str),
        Call(&'static str),
        Ret,
        JmpRax(&'static [&'static str]),
        CallRax(&'static [&'static str]),
        Syscall,
        Sysret,
        Iret,
    }

    fn size(i: I) -> u64 {
        match i {
            I::Label(_) => 0,
            I::Nop | I::Ret => 1,
            I::Mov | I::Sysret => 3,
            I::Jcc(_) => 6,
            I::Jmp(_) | I::Call(_) => 5,
            I::JmpRax(_) | I::CallRax(_) | I::Syscall | I::Iret => 2,
        }
    }

    /// A two-pass assembler: the code bytes, the labels, and per-address indirect-target candidates.
    struct Program {
        code: BTreeMap<u64, u8>,
        labels: BTreeMap<&'static str, u64>,
        candidates: BTreeMap<u64, Vec<u64>>,
    }

    impl Program {
        fn new(segments: &[(u64, &[I])]) -> Program {
            let mut labels = BTreeMap::new();
            for (base, insns) in segments {
                let mut at = *base;
                for &i in insns.iter() {
                    if let I::Label(l) = i {
                        labels.insert(l, at);
                    }
                    at += size(i);
                }
            }
            let mut code = BTreeMap::new();
            let mut candidates = BTreeMap::new();
            for (base, insns) in segments {
                let mut at = *base;
                for &i in insns.iter() {
                    let end = at + size(i);
                    let rel = |l: &str| (labels[l] as i64 - end as i64) as i32;
                    let bytes: Vec<u8> = match i {
                        I::Label(_) => vec![],
                        I::Nop => vec![0x90],
                        I::Mov => vec![0x48, 0x89, 0xD8],
                        I::Jcc(l) => [vec![0x0F, 0x85], rel(l).to_le_bytes().to_vec()].concat(),
                        I::Jmp(l) => [vec![0xE9], rel(l).to_le_bytes().to_vec()].concat(),
                        I::Call(l) => [vec![0xE8], rel(l).to_le_bytes().to_vec()].concat(),
                        I::Ret => vec![0xC3],
                        I::JmpRax(ts) | I::CallRax(ts) => {
                            candidates.insert(at, ts.iter().map(|l| labels[l]).collect());
                            if matches!(i, I::JmpRax(_)) {
                                vec![0xFF, 0xE0]
                            } else {
                                vec![0xFF, 0xD0]
                            }
                        }
                        I::Syscall => vec![0x0F, 0x05],
                        I::Sysret => vec![0x48, 0x0F, 0x07],
                        I::Iret => vec![0x48, 0xCF],
                    };
                    for (k, b) in bytes.iter().enumerate() {
                        code.insert(at + k as u64, *b);
                    }
                    at = end;
                }
            }
            Program { code, labels, candidates }
        }

        fn read(&self, ip: u64, buf: &mut [u8]) -> usize {
            let mut n = 0;
            while n < buf.len() {
                match self.code.get(&(ip + n as u64)) {
                    Some(b) => buf[n] = *b,
                    None => break,
                }
                n += 1;
            }
            n
        }
    }

    const USER: Context = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };
    const KERNEL: Context = Context { cpl: 0, cr3: 0x1000, mode: ExecMode::Bit64 };

    fn program() -> Program {
        use I::*;
        const USER_CODE: &[I] = &[
            Label("main"),
            Nop,
            Mov,
            Jcc("skip1"),
            Call("f1"),
            Label("skip1"),
            CallRax(&["f1", "f2", "f3"]),
            Mov,
            JmpRax(&["m2", "m3"]),
            Label("m2"),
            Nop,
            Syscall,
            Jmp("m3"),
            Label("m3"),
            Jcc("main"),
            Call("f2"),
            Jmp("main"),
            Label("f1"),
            Nop,
            Jcc("f1_end"),
            Mov,
            Label("f1_end"),
            Ret,
            Label("f2"),
            Call("f1"),
            Nop,
            Call("f3"),
            Ret,
            Label("f3"),
            Jcc("f3_b"),
            Nop,
            Label("f3_b"),
            Ret,
        ];
        const KERNEL_CODE: &[I] = &[
            Label("kentry"),
            Nop,
            Jcc("k2"),
            Mov,
            Label("k2"),
            Sysret,
            Label("irq"),
            Nop,
            Jcc("irq2"),
            Mov,
            Label("irq2"),
            Iret,
        ];
        Program::new(&[(0x40_1000, USER_CODE), (0xFFFF_FFFF_8100_0000, KERNEL_CODE)])
    }

    struct RunConfig {
        ctl: RtitCtl,
        events: RtitEvents,
        /// RANGE0 as labels [from, to).
        range0: Option<(&'static str, &'static str)>,
        pkt_mask: u8,
        interrupts: bool,
        seed: u64,
    }

    /// Execute the program with random branch outcomes, feed the tracer, and return the generated
    /// bytes and the instructions that started with PacketEn = 1 (the ground truth), up to the last
    /// instruction after which RTIT_TNT_BUFF is empty and a packet was generated.
    fn run(p: &Program, cfg: &RunConfig, steps: usize) -> (Vec<u8>, Vec<u64>) {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x100_0000, 0x10_0000);
        let mut t = RtitTracer::new(RtitOptions::default(), USER).with_packet_log();
        t.rdmsr(RTIT_CTL).unwrap();
        let setup = p.labels["main"];
        let mut w = |t: &mut RtitTracer, msr: u32, v: u64| t.wrmsr(msr, v, setup - 2, setup, &mut mem).unwrap();
        w(&mut t, RTIT_BASE_ADDR, 0x100_0000);
        w(&mut t, RTIT_LIMIT_MASK, 0xF_FFFF);
        let mut pkt = RtitPktCnt::default();
        pkt.set_pkt_mask(cfg.pkt_mask);
        w(&mut t, RTIT_PKT_CNT, pkt.0);
        if let Some((a, b)) = cfg.range0 {
            w(&mut t, RTIT_LIP0, p.labels[a]);
            w(&mut t, RTIT_LIP2, p.labels[b]);
        }
        w(&mut t, RTIT_EVENTS, cfg.events.0);
        let mut ctl = cfg.ctl;
        ctl.set_trace_en(true);
        w(&mut t, RTIT_CTL, ctl.0);
        ctl.set_trace_active(true);
        w(&mut t, RTIT_CTL, ctl.0);

        let mut rng = Rng(cfg.seed);
        let mut ip = setup;
        let mut ctx = USER;
        let mut stack: Vec<u64> = Vec::new();
        let mut syscall_ret = 0;
        let mut irq_ret: Option<u64> = None;
        let mut truth = Vec::new();
        let mut complete = (0usize, 0usize);
        let mut tsc = 0;
        for step in 0..steps {
            tsc += 1 + rng.below(40);
            t.set_tsc(tsc);
            if cfg.interrupts && ctx == USER && irq_ret.is_none() && rng.below(40) == 0 {
                // An interrupt before the instruction at `ip`: FUP.FAR with the resume IP.
                irq_ret = Some(ip);
                ctx = KERNEL;
                let handler = p.labels["irq"];
                t.async_event(AsyncKind::Interrupt { resume_ip: ip }, handler, ctx);
                ip = handler;
            }
            let mut buf = [0u8; 15];
            let n = p.read(ip, &mut buf);
            let insn = classify(&buf[..n], ip, 64).expect("valid code");
            let nlip = insn.nlip();
            if t.packet_en() {
                truth.push(ip);
            }
            let before = t.stats().packets;
            let next = match insn.kind {
                BranchKind::None => nlip,
                BranchKind::Conditional { target } => {
                    if rng.below(2) == 0 {
                        target
                    } else {
                        nlip
                    }
                }
                BranchKind::DirectJump { target } => target,
                BranchKind::DirectCall { target } => {
                    stack.push(nlip);
                    target
                }
                BranchKind::IndirectJump | BranchKind::IndirectCall => {
                    let c = &p.candidates[&ip];
                    if insn.kind == BranchKind::IndirectCall {
                        stack.push(nlip);
                    }
                    c[rng.below(c.len() as u64) as usize]
                }
                BranchKind::Return => stack.pop().expect("balanced calls"),
                BranchKind::Far(k) => {
                    let (next, to) = match k {
                        FarKind::Syscall => {
                            syscall_ret = nlip;
                            (p.labels["kentry"], KERNEL)
                        }
                        FarKind::Sysret => (syscall_ret, USER),
                        FarKind::Iret => (irq_ret.take().expect("in an interrupt"), USER),
                        other => panic!("{other:?}"),
                    };
                    t.far_transfer(ip, nlip, k, next, to);
                    ctx = to;
                    ip = next;
                    if t.stats().packets > before && t.rdmsr(RTIT_TNT_BUFF) == Some(1) {
                        complete = (step, truth.len());
                    }
                    continue;
                }
                other => panic!("{other:?}"),
            };
            t.branch(ip, nlip, insn.kind, next);
            if t.stats().packets > before && t.rdmsr(RTIT_TNT_BUFF) == Some(1) {
                complete = (step, truth.len());
            }
            ip = next;
        }
        assert!(complete.0 > steps / 2, "a packet boundary late in the run");
        truth.truncate(complete.1);
        t.finish();
        (t.take_generated_bytes(), truth)
    }

    fn check(cfg: RunConfig) {
        let p = program();
        let (bytes, truth) = run(&p, &cfg, 3000);
        let opts = FlowOptions { cycle_acc: cfg.ctl.cycle_acc(), ..FlowOptions::default() };
        let code = |ip: u64, buf: &mut [u8]| p.read(ip, buf);
        let events = reconstruct(&bytes, &code, opts).unwrap_or_else(|e| panic!("{e}"));
        let decoded = instructions(&events);
        assert!(truth.len() > 500, "only {} traced instructions", truth.len());
        assert!(decoded.len() >= truth.len());
        assert_eq!(decoded[..truth.len()], truth[..]);
    }

    fn user_and_kernel() -> RtitCtl {
        let mut c = RtitCtl(0);
        c.set_user(true).set_os(true);
        c
    }

    #[test]
    fn flow_of_everything_traced_matches_execution() {
        check(RunConfig {
            ctl: user_and_kernel(),
            events: RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff),
            range0: None,
            pkt_mask: 2,
            interrupts: true,
            seed: 1,
        });
    }

    #[test]
    fn flow_with_ret_compression_psbs_and_cycle_counts_matches_execution() {
        let mut ctl = user_and_kernel();
        ctl.set_cmprs_ret(true).set_cycle_acc(true).set_mtc_en(true).set_sts_en(true);
        for seed in [2, 3, 4] {
            check(RunConfig {
                ctl,
                events: RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff),
                range0: None,
                pkt_mask: 0,
                interrupts: true,
                seed,
            });
        }
    }

    #[test]
    fn flow_with_ip_filter_matches_the_instructions_inside_the_range() {
        let mut ctl = user_and_kernel();
        ctl.set_cmprs_ret(true);
        for seed in [5, 6] {
            // RANGE0 = main..f2: main, m2, m3 and f1 are traced; f2, f3 and the kernel are not.
            check(RunConfig {
                ctl,
                events: RtitEvents::new(EventId::Range0, EventId::AlwaysOff),
                range0: Some(("main", "f2")),
                pkt_mask: 1,
                interrupts: true,
                seed,
            });
        }
    }

    #[test]
    fn flow_of_user_only_tracing_skips_the_kernel() {
        let mut ctl = RtitCtl(0);
        ctl.set_user(true).set_cmprs_ret(true);
        check(RunConfig {
            ctl,
            events: RtitEvents::new(EventId::AlwaysOn, EventId::AlwaysOff),
            range0: None,
            pkt_mask: 2,
            interrupts: true,
            seed: 7,
        });
    }

    #[test]
    fn decoder_reports_transfers_and_enables() {
        let p = program();
        let cfg = RunConfig {
            ctl: user_and_kernel(),
            events: RtitEvents::new(EventId::Range0, EventId::AlwaysOff),
            range0: Some(("main", "f2")),
            pkt_mask: 2,
            interrupts: true,
            seed: 9,
        };
        let (bytes, _) = run(&p, &cfg, 2000);
        let code = |ip: u64, buf: &mut [u8]| p.read(ip, buf);
        let events = reconstruct(&bytes, &code, FlowOptions::default()).unwrap();
        assert!(events.iter().any(|e| matches!(e, FlowEvent::Enable { .. })));
        assert!(events.iter().any(|e| matches!(e, FlowEvent::Disable { .. })));
        // Row 30: a SYSCALL out of the range keeps ContextEn, so FUP.PGD is followed by the TIP.
        assert!(events.iter().any(|e| matches!(e, FlowEvent::Transfer { to, .. } if *to == p.labels["kentry"])));
    }
}
