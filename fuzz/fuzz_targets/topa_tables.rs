//! Arbitrary guest-memory contents for ToPA tables (END/STOP/INT entries, any size, entries
//! pointing at holes, END chains that loop, tables inside their own output regions, reserved
//! bits) and single-range configurations, then a stream of packet bytes written through
//! `OutputUnit` in chunks, with restarts and guest writes in between.
//!
//! Invariants:
//! - no panic, and bounded work: each `start` reads at most two table entries, and each `write`
//!   of n bytes reads at most 2 entries per ToPA region it completes and makes one store per
//!   region chunk plus one per 4 KiB granule of a chunk that hits restricted memory, however the
//!   tables loop (libFuzzer's -timeout catches a hang the counters would miss);
//! - every store lies inside a region the guest configured, as the independent `RefOutput`
//!   computes it (a ToPA region named by a table entry read at the time the pointer reached it,
//!   or [base, base+mask+1) for a single range); guest RAM is byte-identical to the reference's;
//! - errors as hardware reports them (SDM §33.2.7.1 "Single-Range Output Errors", §33.2.7.2 "ToPA
//!   Errors", STOP and INT): `start` fails exactly when the reference does, `write` reports the
//!   same consumed count, STOP, error and (multi-entry ToPA) PMI, the unit's state follows
//!   (Running / Stopped / Error), and OUTPUT_BASE / OUTPUT_MASK_PTRS read back the reference's
//!   pointers (on an error: the entry that holds it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pttrace_core::guest_mem::GuestMemory;
use pttrace_core::pt::output::{OutputState, OutputUnit};
use pttrace_fuzz::*;

fn run(data: &[u8]) {
    let mut inp = Input::new(data);
    let Some(caps_sel) = inp.u8() else { return };
    let caps = caps_for(caps_sel);
    let mut mem = new_memory();
    let mut ref_mem = mem.clone();
    let mut unit = OutputUnit::new(caps);
    let mut reference = RefOutput::new(caps);
    let mut stream_pos = 0u64;
    let mut steps = 0;
    while let Some(op) = inp.u8() {
        steps += 1;
        if steps > 2048 {
            break;
        }
        let ok = (|| -> Option<()> {
            match op % 8 {
                // A ToPA entry: table, index, region/next-table base, size and flags.
                0 | 1 => {
                    let table = addr_sel(inp.u8()?, inp.u16()?) & !0xFFF;
                    let index = u64::from(inp.u8()?);
                    let base = addr_sel(inp.u8()?, inp.u16()?) & !0xFFF;
                    let sf = inp.u8()?;
                    let flags = [0, TOPA_END, TOPA_INT, TOPA_STOP, TOPA_INT | TOPA_STOP, TOPA_END | TOPA_STOP, 1 << 1, 1 << 10]
                        [usize::from(sf & 7)];
                    let v = base | (u64::from(sf >> 4) << 6) | flags;
                    let _ = mem.write_u64(table + 8 * index, v);
                    let _ = ref_mem.write_u64(table + 8 * index, v);
                }
                // A raw 64-bit guest store anywhere.
                2 => {
                    let a = addr_sel(inp.u8()?, inp.u16()?);
                    let v = inp.u64()?;
                    let _ = mem.write_u64(a, v);
                    let _ = ref_mem.write_u64(a, v);
                }
                // TraceEn 0 -> 1: start with OUTPUT_BASE / OUTPUT_MASK_PTRS.
                3 => {
                    let topa = op & 0x10 != 0;
                    let base = addr_sel(inp.u8()?, inp.u16()?);
                    // Keep what WRMSR OUTPUT_BASE allows (bits 6:0 and >= MAXPHYADDR #GP) unless
                    // the input asks for a raw value.
                    let base = if op & 0x20 != 0 { base } else { base & !0x7F & !caps.phys_addr_reserved_mask() };
                    let ptrs = inp.u64()?;
                    let ptrs = if op & 0x40 != 0 { ptrs } else { ptrs & 0x0000_FFFF_0000_FFFF };
                    mem.writes.clear();
                    let mut c = Counting { mem: &mut mem, reads: 0, writes: 0 };
                    let r = unit.start(topa, base, ptrs, &mut c);
                    assert!(c.reads <= 2 && c.writes == 0, "start: {} reads, {} writes", c.reads, c.writes);
                    let ok = reference.start(topa, base, ptrs, &mut ref_mem);
                    assert_eq!(r.is_ok(), ok, "start(topa={topa}, {base:#x}, {ptrs:#x}) = {r:?}, reference {ok}");
                    assert_eq!(unit.state(), if ok { OutputState::Running } else { OutputState::Error });
                }
                // TraceEn 1 -> 0.
                4 => {
                    unit.stop();
                    reference.stop();
                    assert_eq!(unit.state(), OutputState::Idle);
                }
                // WRMSR OUTPUT_BASE / OUTPUT_MASK_PTRS while TraceEn = 0.
                5 => {
                    let v = inp.u64()?;
                    if op & 0x10 != 0 {
                        unit.set_output_base(v);
                        reference.set_msrs(Some(v), None);
                    } else {
                        unit.set_output_mask_ptrs(v);
                        reference.set_msrs(None, Some(v));
                    }
                }
                // Packet bytes: up to 64 KiB in one write.
                _ => {
                    let n = usize::from(inp.u16()?);
                    let n = if op & 0x10 != 0 { n } else { n & 0xFFF };
                    let bytes = stream_bytes(stream_pos, n);
                    stream_pos += n as u64;
                    let state = unit.state();
                    mem.writes.clear();
                    let mut c = Counting { mem: &mut mem, reads: 0, writes: 0 };
                    let out = unit.write(&mut c, &bytes);
                    let (reads, writes) = (c.reads, c.writes);
                    let r = reference.write(&mut ref_mem, &bytes);
                    // Regions are at least 4 KiB (ToPA) or 128 bytes (single range), so the write
                    // spans at most n / 128 + 2 of them; each region filled costs at most two
                    // entry reads, each chunk one store plus one per 4 KiB granule on a retry.
                    let chunks = r.targets.len() as u64;
                    assert!(chunks <= (n as u64) / 128 + 2, "reference split {n} bytes into {chunks} chunks");
                    assert!(reads <= 2 * ((n as u64) / 4096 + 2), "write of {n} bytes read {reads} table entries");
                    let stores: u64 = r.targets.iter().map(|&(a, l)| 1 + (a % 4096 + l).div_ceil(4096)).sum();
                    assert!(writes <= stores, "write of {n} bytes made {writes} stores (bound {stores})");
                    assert_writes_inside(&mem.writes, &r.targets, "write");
                    mem.writes.clear();
                    assert_same_ram_at(&mut mem, &mut ref_mem, &r.targets, "write");
                    assert_eq!(out.written, r.consumed, "bytes consumed vs reference ({state:?})");
                    assert_eq!(out.stopped, r.stopped, "STOP vs reference");
                    assert_eq!(out.error.is_some(), r.error, "error vs reference: {:?}", out.error);
                    if caps.topa_multi {
                        assert_eq!(out.pmi, r.pmi, "PMI vs reference");
                    }
                    if out.written < n {
                        assert!(out.stopped || out.error.is_some() || state != OutputState::Running);
                    }
                    let expect_state = match reference.state {
                        RefState::Idle => OutputState::Idle,
                        RefState::Running => OutputState::Running,
                        RefState::Stopped => OutputState::Stopped,
                        RefState::Error => OutputState::Error,
                    };
                    assert_eq!(unit.state(), expect_state);
                }
            }
            Some(())
        })();
        if ok.is_none() {
            break;
        }
        assert_eq!(unit.output_base(), reference.output_base(), "OUTPUT_BASE vs reference");
        assert_eq!(unit.output_mask_ptrs(), reference.output_mask_ptrs(), "OUTPUT_MASK_PTRS vs reference");
    }
    assert!(ram_image(&mut mem) == ram_image(&mut ref_mem), "guest RAM differs from the reference");
}

fuzz_target!(|data: &[u8]| run(data));
