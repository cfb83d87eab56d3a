//! Silvermont/Airmont RTIT errata (RTIT Programming Reference v1.05, Appendix E), and the switch
//! that reproduces some of them for decoder testing.
//!
//! The model is correct by default: every flag in [`Errata`] is off. Turning one on makes the
//! tracer misbehave the way the erratum describes, so a decoder's workaround can be exercised.
//!
//! | ID | Erratum | Reproduced as | Decoder workaround (seed) |
//! |----|---------|---------------|---------------------------|
//! | E1 | FUP.FAR may carry an address inside the far-transfer instruction ("more than 3 prefixes") | far-transfer *instructions* of 5 bytes or more (the shortest with 4 prefixes) report NLIP-1 | treat a FUP.FAR inside the far instruction as coming from its NLIP |
//! | E2 | extra FUP.PGD with IP filtering or TraceStop | PacketEn 0 before and after, FilterEn 1->0 (or TraceStop), and ContextEn 0->1 (or a WRMSR raising TriggerEn): FUP.PGD(NLIP) | ignore a FUP.PGD that follows a FUP.PGD without an intervening FUP.PGE |
//! | E3 | PSB may be delayed by one packet | the Pkt_Mask PSB goes out after the next packet | none |
//! | E4 | TraceStop during buffer overflow may not clear TraceActive | the TraceStop packet goes out at once (before FUP.BuffOvf), TraceActive stays set | none (tracing continues past the stop point) |
//! | E5 | FUP.BuffOvf may be followed by a TIP | when the instruction at which the overflow clears is a COFI, TIP(resume IP) follows FUP.BuffOvf | ignore a TIP right after FUP.BuffOvf whose IP equals the FUP's |
//! | E6 | CYC payload one less than the cycles passed | every cycle count packet carries cycles-1 (0 stays 0) | add 1 to every non-zero CYC payload |
//! | E7 | first MTC after enable may be incorrect | an MTC with the current TSC bits is sent right after the enable PSB | ignore the first MTC after enabling |
//! | E8 | packets after a PSB may be out of order or dropped | not reproduced: the seed gives no deterministic rule ("complex micro-architectural condition") | none |
//!
//! The decoder (`super::decode`) applies the workarounds of E1, E2, E5, E6 and E7 when its
//! `errata` option asks for them.

/// Which errata the tracer reproduces (all off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Errata {
    /// E1: FUP.FAR with an address inside the far-transfer instruction.
    pub e1_far_fup_inside_insn: bool,
    /// E2: extra FUP.PGD packets with IP filtering or TraceStop.
    pub e2_extra_pgd: bool,
    /// E3: the Pkt_Mask PSB is delayed by one packet.
    pub e3_psb_delayed: bool,
    /// E4: a TraceStop during buffer overflow does not clear TraceActive.
    pub e4_stop_keeps_trace_active: bool,
    /// E5: a TIP follows FUP.BuffOvf.
    pub e5_tip_after_buffovf: bool,
    /// E6: CYC payloads are one less than the cycles passed.
    pub e6_cyc_minus_one: bool,
    /// E7: a spurious MTC right after enabling.
    pub e7_early_first_mtc: bool,
}

impl Errata {
    /// Every reproducible erratum on.
    pub const ALL: Errata = Errata {
        e1_far_fup_inside_insn: true,
        e2_extra_pgd: true,
        e3_psb_delayed: true,
        e4_stop_keeps_trace_active: true,
        e5_tip_after_buffovf: true,
        e6_cyc_minus_one: true,
        e7_early_first_mtc: true,
    };

    /// Parse a list such as "E1,E6" (case-insensitive; "all" for every one). Unknown IDs and E8
    /// are refused.
    pub fn parse(list: &str) -> Result<Errata, String> {
        let mut e = Errata::default();
        for id in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match id.to_ascii_uppercase().as_str() {
                "ALL" => e = Errata::ALL,
                "E1" => e.e1_far_fup_inside_insn = true,
                "E2" => e.e2_extra_pgd = true,
                "E3" => e.e3_psb_delayed = true,
                "E4" => e.e4_stop_keeps_trace_active = true,
                "E5" => e.e5_tip_after_buffovf = true,
                "E6" => e.e6_cyc_minus_one = true,
                "E7" => e.e7_early_first_mtc = true,
                other => return Err(format!("unknown or non-reproducible RTIT erratum {other:?}")),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_names_each_erratum() {
        assert_eq!(Errata::parse(""), Ok(Errata::default()));
        let e = Errata::parse("e1, E6").unwrap();
        assert!(e.e1_far_fup_inside_insn && e.e6_cyc_minus_one && !e.e2_extra_pgd);
        assert_eq!(Errata::parse("all"), Ok(Errata::ALL));
        assert!(Errata::parse("E8").is_err());
    }
}
