//! ContextEn and FilterEn (SDM Vol. 3C §33.2.5 "Trace Filtering", §33.2.6.3, §33.2.6.5).

use super::rtit_ctl::AddrCfg;
use super::tracer::{Context, TraceConfig};

/// ContextEn: false when (OS=0 and CPL=0), or (User=0 and CPL>0), or (CR3Filter=1 and CR3 does
/// not match IA32_RTIT_CR3_MATCH). The comparison uses CR3[63:5] (§33.2.5.2 compares the
/// address bits; bits 4:0 are ignored so PAE and 4/5-level CR3 values compare alike).
pub fn context_en(cfg: &TraceConfig, ctx: &Context) -> bool {
    let ctl = cfg.ctl;
    if ctx.cpl == 0 && !ctl.os() {
        return false;
    }
    if ctx.cpl > 0 && !ctl.user() {
        return false;
    }
    if ctl.cr3_filter() && (ctx.cr3 & !0x1F) != (cfg.cr3_match & !0x1F) {
        return false;
    }
    true
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpFilterResult {
    /// FilterEn: 1 if no range is configured as a filter, else 1 iff the IP is inside one.
    pub filter_en: bool,
    /// The IP is inside a range configured as TraceStop.
    pub trace_stop: bool,
}

/// Evaluate the ADDRn ranges the profile implements at `ip` (§33.2.5.3).
pub fn ip_filter(cfg: &TraceConfig, ip: u64) -> IpFilterResult {
    let mut any_filter = false;
    let mut in_filter = false;
    let mut trace_stop = false;
    for n in 0..cfg.num_ranges.min(4) {
        match cfg.ctl.addr_cfg(n) {
            AddrCfg::Filter => {
                any_filter = true;
                in_filter |= cfg.addr[n].contains(ip);
            }
            AddrCfg::TraceStop => trace_stop |= cfg.addr[n].contains(ip),
            AddrCfg::Unused | AddrCfg::Reserved(_) => {}
        }
    }
    IpFilterResult { filter_en: !any_filter || in_filter, trace_stop }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pt::packet::ExecMode;
    use crate::pt::rtit_ctl::{AddrRange, RtitCtl};

    fn cfg(ctl: u64) -> TraceConfig {
        TraceConfig { ctl: RtitCtl(ctl), ..TraceConfig::default() }
    }

    #[test]
    fn user_only_tracing_has_no_context_in_ring_0() {
        let c = cfg(0x2509); // TraceEn User ToPA TSCEn BranchEn
        let user = Context { cpl: 3, cr3: 0x1000, mode: ExecMode::Bit64 };
        let kernel = Context { cpl: 0, ..user };
        assert!(context_en(&c, &user));
        assert!(!context_en(&c, &kernel));
    }

    #[test]
    fn cr3_filter_ignores_bits_4_to_0() {
        let mut c = cfg(0x2509 | 0x80 | 0x4);
        c.cr3_match = 0x1234_5000;
        let ctx = Context { cpl: 0, cr3: 0x1234_5018, mode: ExecMode::Bit64 };
        assert!(context_en(&c, &ctx));
        assert!(!context_en(&c, &Context { cr3: 0x1234_6000, ..ctx }));
    }

    #[test]
    fn filter_ranges_are_inclusive_and_stop_ranges_do_not_filter() {
        let mut c = cfg(0);
        c.ctl.set_addr_cfg(0, AddrCfg::Filter).set_addr_cfg(1, AddrCfg::TraceStop);
        c.addr[0] = AddrRange { a: 0x1000, b: 0x1fff };
        c.addr[1] = AddrRange { a: 0x1800, b: 0x1800 };
        assert_eq!(ip_filter(&c, 0x1000), IpFilterResult { filter_en: true, trace_stop: false });
        assert_eq!(ip_filter(&c, 0x1fff).filter_en, true);
        assert_eq!(ip_filter(&c, 0x2000).filter_en, false);
        assert_eq!(ip_filter(&c, 0x1800), IpFilterResult { filter_en: true, trace_stop: true });
        let no_filter = cfg(0);
        assert!(ip_filter(&no_filter, 0xdead).filter_en);
    }

    #[test]
    fn ranges_beyond_the_profile_count_are_ignored() {
        let mut c = cfg(0);
        c.num_ranges = 2;
        c.ctl.set_addr_cfg(2, AddrCfg::Filter);
        c.addr[2] = AddrRange { a: 0, b: 0x10 };
        assert!(ip_filter(&c, 0x1000).filter_en);
    }
}
