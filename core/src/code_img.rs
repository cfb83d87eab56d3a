//! The versioned code sideband `code.img` (issue 19): its magic, record kinds and encoders,
//! shared by the plugin (writer) and the tool (reader).
//!
//! ```text
//! magic  "PTCODE2\n"
//! record kind u8, then by kind (all integers little-endian):
//!   1 VERSION  vaddr u64, len u32, bytes[len]   version ids count VERSION records from 0
//!   2 SWITCH   thread u32, count u64, version u32
//!   3 OVF      thread u32, ordinal u32, count u64
//! ```
//!
//! A VERSION record holds the bytes of one translated block, written once per distinct
//! (address, bytes) pair: code.img grows with the versions translated, never with executions.
//!
//! The key of a version is a thread's *instruction count*: the number of instructions of that
//! thread a decoder has seen before (every executed instruction once; a REP string instruction
//! once per execution, however often QEMU re-enters it: what libipt decodes and what
//! `thread-N.truth` lists). A SWITCH record says: from instruction `count` of thread `thread` on,
//! the bytes of `version` are at its address. The decoder's view of memory for a thread is the
//! *base image* (each byte as first recorded by a VERSION record) overlaid by that thread's
//! SWITCH records up to its current count, in file order. The plugin writes SWITCH records only
//! once some version conflicts with bytes recorded before (code was rewritten); until then the
//! base image is exact for every thread.
//!
//! An overflow loses instructions the decoder cannot count. An OVF record gives the count at
//! which the thread's `ordinal`-th OVF (1-based, in stream order) resumes (the instruction at the
//! FUP or TIP.PGE after it); `count` is `u64::MAX` if the plugin could not tell.

/// The first 8 bytes of a versioned code.img.
pub const MAGIC_V2: &[u8; 8] = b"PTCODE2\n";
/// The first 8 bytes of a code.img without versions (later records win).
pub const MAGIC_V1: &[u8; 8] = b"PTCODE1\n";

pub const KIND_VERSION: u8 = 1;
pub const KIND_SWITCH: u8 = 2;
pub const KIND_OVF: u8 = 3;

/// Bytes of a SWITCH record (kind included).
pub const SWITCH_LEN: usize = 1 + 4 + 8 + 4;
/// Bytes of an OVF record (kind included).
pub const OVF_LEN: usize = 1 + 4 + 4 + 8;
/// Bytes of a VERSION record before its code bytes (kind included).
pub const VERSION_HEADER: usize = 1 + 8 + 4;

/// A count the plugin could not determine (OVF records).
pub const UNKNOWN_COUNT: u64 = u64::MAX;

pub fn version_record(vaddr: u64, bytes: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(VERSION_HEADER + bytes.len());
    r.push(KIND_VERSION);
    r.extend_from_slice(&vaddr.to_le_bytes());
    r.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    r.extend_from_slice(bytes);
    r
}

pub fn switch_record(thread: u32, count: u64, version: u32) -> [u8; SWITCH_LEN] {
    let mut r = [0u8; SWITCH_LEN];
    r[0] = KIND_SWITCH;
    r[1..5].copy_from_slice(&thread.to_le_bytes());
    r[5..13].copy_from_slice(&count.to_le_bytes());
    r[13..17].copy_from_slice(&version.to_le_bytes());
    r
}

pub fn ovf_record(thread: u32, ordinal: u32, count: u64) -> [u8; OVF_LEN] {
    let mut r = [0u8; OVF_LEN];
    r[0] = KIND_OVF;
    r[1..5].copy_from_slice(&thread.to_le_bytes());
    r[5..9].copy_from_slice(&ordinal.to_le_bytes());
    r[9..17].copy_from_slice(&count.to_le_bytes());
    r
}
