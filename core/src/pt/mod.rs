//! Intel Processor Trace (SDM Vol. 3C chapter 33 in recent editions).
pub mod packet;
pub mod encode;
pub mod decode;
pub mod last_ip;
pub mod dump;
