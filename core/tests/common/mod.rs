//! Packet-building helpers shared by the RTIT integration tests: FUP packets and the LIP forms of
//! the RTIT reference's Table 18 (CNT selects 16 or 32 low bits; Zext says whether the upper
//! bits are zero or taken from RTIT_LAST_LIP).
#![allow(dead_code)] // each test file uses a subset

use pttrace_core::rtit::packet::{FupKind, Lip, Packet};

pub fn fup(kind: FupKind, lip: Lip) -> Packet {
    Packet::Fup { kind, lip }
}

/// CNT = 0, Zext = 1: the low 16 bits, upper bits zero.
pub fn z16(ip: u64) -> Lip {
    Lip { cnt: 0, zext: true, payload: ip }
}

/// CNT = 1, Zext = 1: the low 32 bits, upper bits zero.
pub fn z32(ip: u64) -> Lip {
    Lip { cnt: 1, zext: true, payload: ip }
}

/// CNT = 0, Zext = 0: the low 16 bits, upper bits from RTIT_LAST_LIP.
pub fn c16(ip: u64) -> Lip {
    Lip { cnt: 0, zext: false, payload: ip & 0xFFFF }
}

/// CNT = 1, Zext = 0: the low 32 bits, upper bits from RTIT_LAST_LIP.
pub fn c32(ip: u64) -> Lip {
    Lip { cnt: 1, zext: false, payload: ip & 0xFFFF_FFFF }
}
