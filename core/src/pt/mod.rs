//! Intel Processor Trace (SDM Vol. 3C chapter 33 in recent editions).
pub mod buffer_spec;
pub mod caps;
pub mod decode;
pub mod dump;
pub mod enable;
pub mod encode;
pub mod filter;
pub mod internal_buffer;
pub mod last_ip;
pub mod msr;
pub mod output;
pub mod packet;
pub mod readback;
pub mod ret_stack;
pub mod rtit_ctl;
pub mod tnt;
pub mod tracer;
