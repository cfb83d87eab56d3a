//! What RDMSR of IA32_RTIT_STATUS and of the output MSRs shows while the trace unit runs (SDM
//! Vol. 3C §33.2.7.4, Table 33-7): the status bits follow the tracer, the output pointers follow
//! the output unit (issue 13's per-CPU facade: the plugin only asks for it before a trace MSR is
//! read or written).

use super::caps::PtCaps;
use super::msr::{OutputMaskPtrs, RtitMsrs};
use super::output::OutputUnit;
use super::tracer::Tracer;

impl RtitMsrs {
    /// Bring IA32_RTIT_STATUS, IA32_RTIT_OUTPUT_BASE and IA32_RTIT_OUTPUT_MASK_PTRS up to what
    /// hardware shows now.
    pub fn read_back(&mut self, tracer: &Tracer, output: &OutputUnit, caps: &PtCaps) {
        // FilterEn/ContextEn/TriggerEn are evaluated while TraceEn = 1; with tracing off they
        // keep their last values (0 after reset) and TriggerEn reads 0.
        if tracer.trace_en() {
            let (filter_en, context_en, trigger_en) = tracer.status_bits();
            self.status.set_filter_en(filter_en);
            self.status.set_context_en(context_en);
            self.status.set_trigger_en(trigger_en);
        } else {
            self.status.set_trigger_en(false);
        }
        // TraceStop sets Stopped while tracing; once TraceEn is 0, software owns the bit.
        if tracer.trace_en() && tracer.trace_stop_hit() {
            self.status.set_stopped(true);
        }
        // PacketByteCnt counts while tracing; with TraceEn = 0 it holds what software wrote.
        // Without configurable PSB (CPUID.(14H,0):EBX[1] = 0) the field is reserved and reads 0.
        if tracer.trace_en() && caps.psb_cyc {
            self.status.set_packet_byte_cnt(tracer.packet_byte_count().min(u64::from(u32::MAX)) as u32);
        }
        // The output unit owns the output pointers (WRMSRs to them are forwarded to it).
        self.output_base = output.output_base();
        self.output_mask_ptrs = OutputMaskPtrs::new(output.output_mask_ptrs());
    }
}
