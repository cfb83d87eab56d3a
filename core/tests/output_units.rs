//! Trace output units (SDM §33.2.7; seeds 000, 003, 004): single range and ToPA, driven through
//! `OutputUnit` against `SparseMemory`, checking exact bytes, the exact list of stores and the
//! IA32_RTIT_OUTPUT_BASE / IA32_RTIT_OUTPUT_MASK_PTRS read-back.

use pttrace_core::guest_mem::{GuestMemory, SparseMemory};
use pttrace_core::pt::caps::PtCaps;
use pttrace_core::pt::output::{OutputError, OutputState, OutputUnit, WriteOutcome};

// ToPA entry bits (§33.2.7.2 Figure 33-2).
const END: u64 = 1 << 0;
const INT: u64 = 1 << 2;
const STOP: u64 = 1 << 4;

/// An output entry: region base, Size field (4K << size), INT/STOP flags.
fn region(base: u64, size: u64, flags: u64) -> u64 {
    base | (size << 6) | flags
}

fn end(next_table: u64) -> u64 {
    next_table | END
}

/// IA32_RTIT_OUTPUT_MASK_PTRS as Linux programs it for ToPA (pt.c).
fn ptrs(index: u64, offset: u64) -> u64 {
    0x7F | (index << 7) | (offset << 32)
}

fn put_table(mem: &mut SparseMemory, table: u64, entries: &[u64]) {
    for (i, e) in entries.iter().enumerate() {
        mem.write_u64(table + 8 * i as u64, *e).unwrap();
    }
    mem.writes.clear();
}

/// Distinct-looking bytes so an overwrite or a shift shows.
fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8)).collect()
}

fn skylake() -> OutputUnit {
    OutputUnit::new(PtCaps::SKYLAKE)
}

fn single_entry_caps() -> PtCaps {
    PtCaps { topa_multi: false, ..PtCaps::SKYLAKE }
}

fn done(written: usize) -> WriteOutcome {
    WriteOutcome { written, ..WriteOutcome::default() }
}

// ---------------------------------------------------------------------------------------------
// Single range (§33.2.7.1)

#[test]
fn unit_reads_back_reset_values_and_forces_lower_mask_bits() {
    let mut u = skylake();
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0, 0x7F));
    assert_eq!(u.state(), OutputState::Idle);
    u.set_output_base(0x1000);
    u.set_output_mask_ptrs(0x1234_0000_0000_0100);
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, 0x1234_0000_0000_017F));
    let mut mem = SparseMemory::new();
    assert_eq!(u.write(&mut mem, &[1, 2, 3]), WriteOutcome::default(), "idle unit writes nothing");
    assert!(mem.writes.is_empty());
}

#[test]
fn single_range_wrap_300_bytes_into_256_byte_range() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x10000, 0x1000);
    let mut u = skylake();
    // MASK_PTRS[31:7] = 1 -> mask FFH: 256 bytes.
    u.start(false, 0x10000, 0x80, &mut mem).unwrap();
    assert_eq!(u.output_mask_ptrs(), 0xFF);
    let data = pattern(300, 7);
    assert_eq!(u.write(&mut mem, &data), done(300));
    let mut expect = data[..256].to_vec();
    expect[..44].copy_from_slice(&data[256..]);
    assert_eq!(mem.bytes(0x10000, 256), expect);
    assert_eq!(mem.bytes(0x10100, 0x100), vec![0; 0x100], "nothing beyond the range");
    assert_eq!(mem.writes, vec![(0x10000, 256), (0x10000, 44)]);
    assert_eq!(u.output_base(), 0x10000);
    assert_eq!(u.output_mask_ptrs(), 0xFF | (44 << 32));
    u.stop();
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x10000, 0xFF | (44 << 32)));
    assert_eq!(u.write(&mut mem, &[9]), WriteOutcome::default());
}

#[test]
fn single_range_starting_offset_wraps_inside_one_write() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x20000, 0x80);
    let mut u = skylake();
    u.start(false, 0x20000, 0x7F | (100 << 32), &mut mem).unwrap();
    let data = pattern(50, 1);
    assert_eq!(u.write(&mut mem, &data), done(50));
    assert_eq!(mem.writes, vec![(0x20064, 28), (0x20000, 22)]);
    assert_eq!(mem.bytes(0x20064, 28), data[..28].to_vec());
    assert_eq!(mem.bytes(0x20000, 22), data[28..].to_vec());
    assert_eq!(u.output_mask_ptrs(), 0x7F | (22 << 32));
}

#[test]
fn single_range_offset_equal_to_mask_is_the_last_byte() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x10000, 0x100);
    let mut u = skylake();
    u.start(false, 0x10000, 0xFF | (0xFF << 32), &mut mem).unwrap();
    assert_eq!(u.write(&mut mem, &[0xAA, 0xBB]), done(2));
    assert_eq!(mem.writes, vec![(0x100FF, 1), (0x10000, 1)]);
    assert_eq!(mem.bytes(0x100FF, 1), vec![0xAA]);
    assert_eq!(mem.bytes(0x10000, 1), vec![0xBB]);
    assert_eq!(u.output_mask_ptrs(), 0xFF | (1 << 32));
}

#[test]
fn single_range_errors_stop_all_output() {
    let cases = [
        // Non-contiguous mask: bit 8 set, bit 7 clear.
        (0x10000, 0x17F, OutputError::SingleRangeMaskNotContiguous { mask: 0x17F }),
        // Base and mask overlap (base not aligned to the 256-byte range).
        (0x10080, 0xFF, OutputError::SingleRangeBaseMisaligned { base: 0x10080, mask: 0xFF }),
        // Offset greater than the mask.
        (0x10000, 0xFF | (0x100 << 32), OutputError::SingleRangeOffsetBeyondMask { offset: 0x100, mask: 0xFF }),
    ];
    for (base, mask_ptrs, err) in cases {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x10000, 0x1000);
        let mut u = skylake();
        assert_eq!(u.start(false, base, mask_ptrs, &mut mem), Err(err), "{err}");
        assert_eq!(u.state(), OutputState::Error);
        assert_eq!(u.write(&mut mem, &[1; 10]), WriteOutcome::default());
        assert!(mem.writes.is_empty());
        assert_eq!((u.output_base(), u.output_mask_ptrs()), (base, mask_ptrs | 0x7F));
    }
}

#[test]
fn single_range_aimed_at_non_ram_drops_bytes_and_keeps_counting() {
    let mut mem = SparseMemory::new();
    let mut u = skylake();
    u.start(false, 0xFEC0_0000, 0xF80, &mut mem).unwrap();
    assert_eq!(u.write(&mut mem, &pattern(5000, 3)), WriteOutcome { restricted: 5000, ..done(5000) });
    assert!(mem.writes.is_empty());
    assert_eq!(u.restricted_bytes(), 5000);
    assert_eq!(u.output_mask_ptrs(), 0xFFF | ((5000 & 0xFFF) << 32));
    assert_eq!(u.state(), OutputState::Running);
}

#[test]
fn schemes_not_enumerated_are_refused() {
    let mut mem = SparseMemory::new();
    let mut u = OutputUnit::new(PtCaps { single_range: false, ..PtCaps::SKYLAKE });
    assert_eq!(u.start(false, 0x10000, 0xFF, &mut mem), Err(OutputError::SchemeNotEnumerated { topa: false }));
    let mut u = OutputUnit::new(PtCaps { topa: false, topa_multi: false, ..PtCaps::SKYLAKE });
    assert_eq!(u.start(true, 0x1000, 0x7F, &mut mem), Err(OutputError::SchemeNotEnumerated { topa: true }));
    assert_eq!(u.state(), OutputState::Error);
}

// ---------------------------------------------------------------------------------------------
// ToPA (§33.2.7.2)

/// Table at 1000H: 4K at 10000H, 8K at 20000H, 4K at 30000H, END -> 1000H.
fn three_region_ring() -> SparseMemory {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x1000).add_ram(0x20000, 0x2000).add_ram(0x30000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), region(0x20000, 1, 0), region(0x30000, 0, 0), end(0x1000)]);
    mem
}

#[test]
fn topa_three_entries_and_circular_end() {
    let mut mem = three_region_ring();
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let data = pattern(4096 + 8192 + 4096 + 100, 11);
    assert_eq!(u.write(&mut mem, &data[..5000]), done(5000));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(1, 904)));
    assert_eq!(u.write(&mut mem, &data[5000..]), done(data.len() - 5000));
    // The END entry was followed: back to entry 0, never resting on entry 3.
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(0, 100)));
    assert_eq!(mem.writes, vec![(0x10000, 4096), (0x20000, 904), (0x20388, 7288), (0x30000, 4096), (0x10000, 100)]);
    let mut r0 = data[..4096].to_vec();
    r0[..100].copy_from_slice(&data[16384..]);
    assert_eq!(mem.bytes(0x10000, 4096), r0);
    assert_eq!(mem.bytes(0x20000, 8192), data[4096..12288].to_vec());
    assert_eq!(mem.bytes(0x30000, 4096), data[12288..16384].to_vec());
}

#[test]
fn topa_two_chained_tables() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x2000).add_ram(0x10000, 0x1000).add_ram(0x20000, 0x2000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), end(0x2000)]);
    put_table(&mut mem, 0x2000, &[region(0x20000, 0, 0), region(0x21000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let data = pattern(4 * 4096 + 10, 5);
    assert_eq!(u.write(&mut mem, &data[..4096]), done(4096));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x2000, ptrs(0, 0)));
    assert_eq!(u.write(&mut mem, &data[4096..8192 + 100]), done(4196));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x2000, ptrs(1, 100)));
    assert_eq!(u.write(&mut mem, &data[8192 + 100..]), done(data.len() - 8292));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x2000, ptrs(0, 10)));
    assert_eq!(
        mem.writes,
        vec![(0x10000, 4096), (0x20000, 4096), (0x21000, 100), (0x21064, 3996), (0x10000, 4096), (0x20000, 10)]
    );
    assert_eq!(mem.bytes(0x10000, 4096), data[12288..16384].to_vec());
    assert_eq!(mem.bytes(0x20000, 10), data[16384..].to_vec());
    assert_eq!(mem.bytes(0x2000A, 4086), data[4096 + 10..8192].to_vec());
    assert_eq!(mem.bytes(0x21000, 4096), data[8192..12288].to_vec());
}

#[test]
fn topa_start_on_an_end_entry_follows_it_with_offset_zero() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x2000).add_ram(0x20000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), end(0x2000)]);
    put_table(&mut mem, 0x2000, &[region(0x20000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(1, 0x55), &mut mem).unwrap();
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x2000, ptrs(0, 0)));
    assert_eq!(u.write(&mut mem, &[1, 2, 3]), done(3));
    assert_eq!(mem.writes, vec![(0x20000, 3)]);
}

#[test]
fn topa_stop_region_ends_output_at_its_last_byte() {
    let mut mem = three_region_ring();
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), region(0x20000, 1, STOP), region(0x30000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let data = pattern(4096 + 8192 + 500, 9);
    assert_eq!(u.write(&mut mem, &data[..4000]), done(4000));
    let out = u.write(&mut mem, &data[4000..]);
    assert_eq!(out, WriteOutcome { written: 4096 + 8192 - 4000, restricted: 0, pmi: false, stopped: true, error: None });
    assert_eq!(u.state(), OutputState::Stopped);
    // Pointer stays on the STOP entry with offset = region size (linux-guest.md, pt.c).
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(1, 8192)));
    assert_eq!(mem.writes, vec![(0x10000, 4000), (0x10FA0, 96), (0x20000, 8192)]);
    assert_eq!(mem.bytes(0x20000, 8192), data[4096..12288].to_vec());
    assert_eq!(mem.bytes(0x30000, 4096), vec![0; 4096], "bytes after the STOP region are dropped");
    assert_eq!(u.write(&mut mem, &[1; 8]), WriteOutcome::default());
    u.stop();
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(1, 8192)));
    // Re-enabling with that configuration is an operational error (ToPA STOP note, Errors 3).
    assert_eq!(
        u.start(true, u.output_base(), u.output_mask_ptrs(), &mut mem),
        Err(OutputError::OutputOffsetBeyondRegion { table: 0x1000, index: 1, offset: 8192, size: 8192 })
    );
    assert_eq!(mem.writes.len(), 3);
}

#[test]
fn topa_stop_and_int_in_one_entry_report_both() {
    let mut mem = three_region_ring();
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, STOP | INT), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 4000), &mut mem).unwrap();
    let out = u.write(&mut mem, &[7; 200]);
    assert_eq!(out, WriteOutcome { written: 96, restricted: 0, pmi: true, stopped: true, error: None });
    assert_eq!(u.output_mask_ptrs(), ptrs(0, 4096));
    assert_eq!(mem.writes, vec![(0x10FA0, 96)]);
}

#[test]
fn topa_int_region_raises_pmi_exactly_when_it_fills() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x2000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), region(0x11000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    assert_eq!(u.write(&mut mem, &[1; 4095]), done(4095));
    assert_eq!(u.write(&mut mem, &[2]), WriteOutcome { written: 1, restricted: 0, pmi: true, ..done(0) });
    assert_eq!(u.output_mask_ptrs(), ptrs(1, 0));
    assert_eq!(u.write(&mut mem, &[3; 4096]), done(4096), "region without INT: no PMI");
    assert_eq!(u.output_mask_ptrs(), ptrs(0, 0));
    // One write that fills the INT region and continues into the next one.
    let out = u.write(&mut mem, &[4; 5000]);
    assert_eq!(out, WriteOutcome { written: 5000, restricted: 0, pmi: true, stopped: false, error: None });
    assert_eq!(u.output_mask_ptrs(), ptrs(1, 904));
    assert_eq!(mem.bytes(0x11000, 904), vec![4; 904]);
    assert_eq!(mem.bytes(0x11388, 4096 - 904), vec![3; 4096 - 904]);
    assert_eq!(u.state(), OutputState::Running);
}

#[test]
fn topa_largest_table_offset_wraps_to_entry_zero() {
    // proc_trace_table_offset = 0FFFFFF8H (index 1FFFFFFH) is the last entry of a table; when
    // its region fills the pointer returns to the start of the current table (§33.2.7.2).
    let table = 0x1000_0000u64;
    let last = table + 0x0FFF_FFF8;
    let mut mem = SparseMemory::new();
    mem.add_ram(table, 8).add_ram(last, 8).add_ram(0x10000, 0x2000);
    mem.write_u64(table, region(0x10000, 0, 0)).unwrap();
    mem.write_u64(last, region(0x11000, 0, 0)).unwrap();
    mem.writes.clear();
    let mut u = skylake();
    u.start(true, table, ptrs(0x1FF_FFFF, 4090), &mut mem).unwrap();
    assert_eq!(u.output_mask_ptrs(), 0xFFFF_FFFF | (4090 << 32));
    assert_eq!(u.write(&mut mem, &[5; 10]), done(10));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (table, ptrs(0, 4)));
    assert_eq!(mem.writes, vec![(0x11FFA, 6), (0x10000, 4)]);
}

// ---------------------------------------------------------------------------------------------
// ToPA errors (§33.2.7.2 "ToPA Errors")

/// Start a ToPA unit on a one-table memory and return the error.
fn start_err(caps: PtCaps, entries: &[u64], base: u64, mask_ptrs: u64) -> (OutputUnit, SparseMemory, OutputError) {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x4000);
    put_table(&mut mem, 0x1000, entries);
    let mut u = OutputUnit::new(caps);
    let err = u.start(true, base, mask_ptrs, &mut mem).unwrap_err();
    assert_eq!(u.state(), OutputState::Error);
    assert_eq!(u.write(&mut mem, &[1; 64]), WriteOutcome::default());
    assert!(mem.writes.is_empty());
    (u, mem, err)
}

#[test]
fn topa_error_table_base_not_4k_aligned() {
    let (u, _, err) = start_err(PtCaps::SKYLAKE, &[region(0x10000, 0, 0), end(0x1000)], 0x1080, ptrs(0, 0));
    assert_eq!(err, OutputError::TableNotAligned { table: 0x1080 });
    assert_eq!(u.output_base(), 0x1080);
}

#[test]
fn topa_error_table_base_beyond_maxphyaddr() {
    let table = (1u64 << 39) | 0x1000;
    let (_, _, err) = start_err(PtCaps::SKYLAKE, &[], table, ptrs(0, 0));
    assert_eq!(err, OutputError::TableBeyondMaxPhysAddr { table });
}

#[test]
fn topa_error_reserved_bits_in_entry() {
    for bit in [1, 3, 5, 10, 11] {
        let e = region(0x10000, 0, 1 << bit);
        let (_, _, err) = start_err(PtCaps::SKYLAKE, &[e, end(0x1000)], 0x1000, ptrs(0, 0));
        assert_eq!(err, OutputError::EntryReservedBit { table: 0x1000, index: 0, entry: e }, "bit {bit}");
    }
    // Reserved bits are reserved in END entries too.
    let e = end(0x1000) | (1 << 10);
    let (_, _, err) = start_err(PtCaps::SKYLAKE, &[region(0x10000, 0, 0), e], 0x1000, ptrs(1, 0));
    assert_eq!(err, OutputError::EntryReservedBit { table: 0x1000, index: 1, entry: e });
}

#[test]
fn topa_error_entry_base_beyond_maxphyaddr() {
    for high in [1u64 << 39, 1 << 51, 1 << 63] {
        let e = region(0x10000 | high, 0, 0);
        let (_, _, err) = start_err(PtCaps::SKYLAKE, &[e, end(0x1000)], 0x1000, ptrs(0, 0));
        assert_eq!(err, OutputError::EntryBeyondMaxPhysAddr { table: 0x1000, index: 0, entry: e });
    }
}

#[test]
fn topa_error_region_not_aligned_to_its_size() {
    // An 8K region (Size = 1) at 11000H.
    let e = region(0x11000, 1, 0);
    let (_, _, err) = start_err(PtCaps::SKYLAKE, &[e, end(0x1000)], 0x1000, ptrs(0, 0));
    assert_eq!(err, OutputError::RegionNotAligned { table: 0x1000, index: 0, entry: e });
    // 2M region (Size = 9) with base[20:12] != 0.
    let e = region(0x20_1000, 9, 0);
    let (_, _, err) = start_err(PtCaps::SKYLAKE, &[e, end(0x1000)], 0x1000, ptrs(0, 0));
    assert_eq!(err, OutputError::RegionNotAligned { table: 0x1000, index: 0, entry: e });
}

#[test]
fn topa_error_output_offset_not_below_region_size() {
    let t = [region(0x10000, 0, 0), end(0x1000)];
    let (u, _, err) = start_err(PtCaps::SKYLAKE, &t, 0x1000, ptrs(0, 4096));
    assert_eq!(err, OutputError::OutputOffsetBeyondRegion { table: 0x1000, index: 0, offset: 4096, size: 4096 });
    assert_eq!(u.output_mask_ptrs(), ptrs(0, 4096));
    // 4095 is the last byte: legal.
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x1000);
    put_table(&mut mem, 0x1000, &t);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 4095), &mut mem).unwrap();
    assert_eq!(u.write(&mut mem, &[1, 2]), done(2));
    assert_eq!(mem.writes, vec![(0x10FFF, 1), (0x10000, 1)]);
}

#[test]
fn topa_error_end_entry_with_int_or_stop() {
    for flag in [INT, STOP, INT | STOP] {
        let e = end(0x1000) | flag;
        let (_, _, err) = start_err(PtCaps::SKYLAKE, &[region(0x10000, 0, 0), e], 0x1000, ptrs(1, 0));
        assert_eq!(err, OutputError::EndWithIntOrStop { table: 0x1000, index: 1, entry: e });
    }
}

#[test]
fn topa_error_end_in_entry_zero() {
    let (_, _, err) = start_err(PtCaps::SKYLAKE, &[end(0x1000)], 0x1000, ptrs(0, 0));
    assert_eq!(err, OutputError::EndInEntryZero { table: 0x1000, entry: end(0x1000) });
    // Reached through an END entry: the pointer is on entry 0 of the new table.
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x2000).add_ram(0x10000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), end(0x2000)]);
    put_table(&mut mem, 0x2000, &[end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let out = u.write(&mut mem, &[1; 5000]);
    assert_eq!(out.written, 4096);
    assert_eq!(out.error, Some(OutputError::EndInEntryZero { table: 0x2000, entry: end(0x1000) }));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x2000, ptrs(0, 0)));
}

#[test]
fn single_output_region_topa_valid_ring_wraps() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), end(0x1000)]);
    let mut u = OutputUnit::new(single_entry_caps());
    u.start(true, 0x1000, ptrs(0, 4000), &mut mem).unwrap();
    let out = u.write(&mut mem, &[6; 100]);
    assert_eq!(out, WriteOutcome { written: 100, restricted: 0, pmi: true, stopped: false, error: None });
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(0, 4)));
    assert_eq!(mem.writes, vec![(0x10FA0, 96), (0x10000, 4)]);
}

#[test]
fn single_output_region_topa_errors() {
    // 4.c.i: entry 1 with END = 0, found when the first region fills.
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x2000);
    let e1 = region(0x11000, 0, 0);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, 0), e1, end(0x1000)]);
    let mut u = OutputUnit::new(single_entry_caps());
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let out = u.write(&mut mem, &[1; 5000]);
    assert_eq!(out.written, 4096);
    assert_eq!(out.error, Some(OutputError::SingleEntryExtraOutput { table: 0x1000, index: 1, entry: e1 }));
    assert_eq!(u.output_mask_ptrs(), ptrs(1, 0));
    assert_eq!(mem.writes, vec![(0x10000, 4096)]);
    // The same table is fine on a multi-entry part.
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    assert_eq!(u.write(&mut mem, &[1; 5000]), done(5000));
    // 4.c.ii: END entry not pointing back to the table base.
    let e1 = end(0x2000);
    let (_, _, err) = start_err(single_entry_caps(), &[region(0x10000, 0, 0), e1], 0x1000, ptrs(1, 0));
    assert_eq!(err, OutputError::SingleEntryEndNotToTableBase { table: 0x1000, index: 1, entry: e1 });
}

#[test]
fn topa_error_found_when_advancing_leaves_pointer_on_bad_entry() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x2000);
    let bad = region(0x11000, 0, 1 << 3);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), bad, end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let out = u.write(&mut mem, &[1; 5000]);
    assert_eq!(
        out,
        WriteOutcome {
            written: 4096,
            restricted: 0,
            pmi: true,
            stopped: false,
            error: Some(OutputError::EntryReservedBit { table: 0x1000, index: 1, entry: bad })
        }
    );
    assert_eq!(u.state(), OutputState::Error);
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x1000, ptrs(1, 0)));
    assert_eq!(u.write(&mut mem, &[1; 10]), WriteOutcome::default());
    assert_eq!(mem.writes, vec![(0x10000, 4096)]);
}

// ---------------------------------------------------------------------------------------------
// Restricted memory (§33.2.7.4 Table 33-5)

#[test]
fn topa_table_not_in_ram_at_start_is_an_error() {
    let mut mem = SparseMemory::new();
    let mut u = skylake();
    assert_eq!(u.start(true, 0x5000, ptrs(2, 0), &mut mem), Err(OutputError::TableNotRam { addr: 0x5010 }));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (0x5000, ptrs(2, 0)));
}

#[test]
fn topa_table_running_into_non_ram_is_an_error_when_reached() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 8).add_ram(0x10000, 0x1000);
    mem.write_u64(0x1000, region(0x10000, 0, 0)).unwrap();
    mem.writes.clear();
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let out = u.write(&mut mem, &[1; 4097]);
    assert_eq!(out.written, 4096);
    assert_eq!(out.error, Some(OutputError::TableNotRam { addr: 0x1008 }));
    assert_eq!(u.output_mask_ptrs(), ptrs(1, 0));
}

#[test]
fn topa_region_not_in_ram_drops_its_bytes_and_moves_on() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x20000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x80000, 0, INT), region(0x20000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let data = pattern(4106, 2);
    let out = u.write(&mut mem, &data);
    assert_eq!(out, WriteOutcome { written: 4106, restricted: 4096, pmi: true, stopped: false, error: None });
    assert_eq!(mem.writes, vec![(0x20000, 10)]);
    assert_eq!(u.restricted_bytes(), 4096, "the dropped bytes are counted, not lost silently");
    assert_eq!(mem.bytes(0x20000, 10), data[4096..].to_vec());
    assert_eq!(u.output_mask_ptrs(), ptrs(1, 10));
}

#[test]
fn topa_region_partly_in_ram_keeps_the_ram_part() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x40000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x40000, 1, 0), end(0x1000)]);
    let mut u = skylake();
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    let data = pattern(8192, 4);
    assert_eq!(u.write(&mut mem, &data), WriteOutcome { restricted: 4096, ..done(8192) });
    assert_eq!(mem.writes, vec![(0x40000, 4096)]);
    assert_eq!(mem.bytes(0x40000, 4096), data[..4096].to_vec());
    assert_eq!(u.output_mask_ptrs(), ptrs(0, 0));
}

// ---------------------------------------------------------------------------------------------
// A table as Linux builds it (pt.c; shared/reference/linux-guest.md "ToPA as the driver lays it
// out"): one 4 KiB table page of 507 entries, the last an END back to the table start.

const LINUX_TABLE: u64 = 0x10_0000;
const LINUX_DATA: u64 = 0x20_0000;
const TENTS_PER_PAGE: u64 = 507;

fn linux_table(flags: impl Fn(u64) -> u64) -> SparseMemory {
    let mut mem = SparseMemory::new();
    mem.add_ram(LINUX_TABLE, 0x1000).add_ram(LINUX_DATA, (TENTS_PER_PAGE as usize - 1) * 0x1000);
    let mut entries: Vec<u64> = (0..TENTS_PER_PAGE - 1).map(|i| region(LINUX_DATA + i * 0x1000, 0, flags(i))).collect();
    entries.push(end(LINUX_TABLE));
    put_table(&mut mem, LINUX_TABLE, &entries);
    mem
}

#[test]
fn linux_style_table_normal_mode_stops_at_the_stop_entry() {
    // Normal mode: INT before the wakeup point, STOP|INT on the entry before the free-space end.
    let mut mem = linux_table(|i| match i {
        100 => INT,
        300 => STOP | INT,
        _ => 0,
    });
    let mut u = skylake();
    u.start(true, LINUX_TABLE, ptrs(5, 0x123), &mut mem).unwrap();
    let total = (4096 - 0x123) + (300 - 5) * 4096;
    let data = pattern(total as usize + 5000, 13);
    let (mut off, mut pmis, mut stopped) = (0, 0, false);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    while off < data.len() && !stopped {
        let n = (xorshift(&mut rng) % 3000) as usize + 1;
        let chunk = &data[off..(off + n).min(data.len())];
        let out = u.write(&mut mem, chunk);
        assert_eq!(out.error, None);
        pmis += usize::from(out.pmi);
        stopped = out.stopped;
        assert!(out.written == chunk.len() || out.stopped);
        off += out.written;
    }
    assert!(stopped);
    assert_eq!(off as u64, total);
    assert_eq!(pmis, 2, "entry 100 and entry 300");
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (LINUX_TABLE, ptrs(300, 4096)));
    // The regions are consecutive pages here, so the stream is one contiguous run.
    assert_eq!(mem.bytes(LINUX_DATA + 5 * 0x1000 + 0x123, total as usize), data[..total as usize].to_vec());
    assert_eq!(mem.bytes(LINUX_DATA + 301 * 0x1000, 0x1000), vec![0; 0x1000]);
}

#[test]
fn linux_style_table_snapshot_mode_wraps_around_the_whole_table() {
    let mut mem = linux_table(|_| 0);
    let mut u = skylake();
    u.start(true, LINUX_TABLE, ptrs(0, 0), &mut mem).unwrap();
    let ring = (TENTS_PER_PAGE as usize - 1) * 4096;
    let data = pattern(ring + 1000, 17);
    assert_eq!(u.write(&mut mem, &data), done(data.len()));
    assert_eq!((u.output_base(), u.output_mask_ptrs()), (LINUX_TABLE, ptrs(0, 1000)));
    assert_eq!(mem.writes.len(), TENTS_PER_PAGE as usize);
    assert_eq!(mem.bytes(LINUX_DATA, 1000), data[ring..].to_vec());
    assert_eq!(mem.bytes(LINUX_DATA + 1000, ring - 1000), data[1000..ring].to_vec());
}

// ---------------------------------------------------------------------------------------------
// Random tables and writes: never a panic, never a store outside the described regions.

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// Regions (start, len) that the entries of the given table pages describe.
fn described_regions(mem: &mut SparseMemory, tables: &[u64]) -> Vec<(u64, u64)> {
    let mut v = Vec::new();
    for &t in tables {
        for i in 0..512 {
            let e = mem.read_u64(t + 8 * i).unwrap();
            if e & END == 0 {
                v.push((e & !0xFFF, 4096u64 << ((e >> 6) & 0xF)));
            }
        }
    }
    v
}

#[test]
fn random_tables_and_writes_never_store_outside_described_regions() {
    const TABLES: [u64; 2] = [0x1000, 0x2000];
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    // How often each path ran: rounds that stored bytes, PMIs, STOPs, errors found while writing.
    let (mut stored, mut pmis, mut stops, mut late_errors) = (0, 0, 0, 0);
    for round in 0..3000 {
        let mut mem = SparseMemory::new();
        mem.add_ram(0x1000, 0x2000).add_ram(0x10000, 0x20000);
        let pick = |rng: &mut u64, n: u64| xorshift(rng) % n;
        for &t in &TABLES {
            for i in 0..12 {
                let e = match pick(&mut rng, 16) {
                    0 => xorshift(&mut rng),
                    1..=3 => {
                        let next = [0x1000, 0x2000, 0x1800, 0x5000][pick(&mut rng, 4) as usize];
                        let flags = if pick(&mut rng, 10) == 0 { [INT, STOP][pick(&mut rng, 2) as usize] } else { 0 };
                        end(next) | flags
                    }
                    _ => {
                        let size = pick(&mut rng, 3);
                        // 10000H..3FFFFH: some regions run past RAM (30000H), some are misaligned.
                        let mut base = 0x10000 + pick(&mut rng, 48) * 0x1000;
                        if pick(&mut rng, 4) != 0 {
                            base &= !((0x1000 << size) - 1);
                        }
                        let mut flags = 0;
                        if pick(&mut rng, 5) == 0 {
                            flags |= INT;
                        }
                        if pick(&mut rng, 12) == 0 {
                            flags |= STOP;
                        }
                        if pick(&mut rng, 30) == 0 {
                            flags |= 1 << [1, 3, 5, 10, 11][pick(&mut rng, 5) as usize];
                        }
                        region(base, size, flags)
                    }
                };
                mem.write_u64(t + 8 * i, e).unwrap();
            }
        }
        mem.writes.clear();
        let caps = PtCaps { topa_multi: pick(&mut rng, 4) != 0, ..PtCaps::SKYLAKE };
        let topa = pick(&mut rng, 5) != 0;
        let base = if topa {
            [0x1000, 0x1000, 0x1000, 0x2000, 0x2000, 0x2000, 0x1080, 0x5000][pick(&mut rng, 8) as usize]
        } else {
            0x10000 + pick(&mut rng, 0x20) * 0x1000
        };
        let offset = match pick(&mut rng, 8) {
            0 => xorshift(&mut rng) & 0xFFFF_FFFF,
            1 | 2 => pick(&mut rng, 0x4000),
            _ => pick(&mut rng, 0x1000),
        };
        let mask_ptrs = if topa {
            ptrs(pick(&mut rng, 14), offset)
        } else {
            let mask = [0x7F, 0xFFF, 0x1FFF, 0x17F, 0xFFFF][pick(&mut rng, 5) as usize];
            mask | (offset << 32)
        };
        let mut u = OutputUnit::new(caps);
        let started = u.start(topa, base, mask_ptrs, &mut mem).is_ok();
        assert_eq!(u.state() == OutputState::Running, started);
        for _ in 0..=pick(&mut rng, 20) {
            let len = pick(&mut rng, 12000) as usize;
            let before = u.state();
            let out = u.write(&mut mem, &vec![0xA5; len]);
            assert!(out.written <= len);
            if before == OutputState::Running && len > 0 {
                assert!(out.written == len || out.stopped || out.error.is_some(), "round {round}: {out:?}");
            } else {
                assert_eq!(out, WriteOutcome::default());
            }
            assert_eq!(u.output_mask_ptrs() & 0x7F, 0x7F);
            assert!(!(out.stopped && out.error.is_some()));
            pmis += usize::from(out.pmi);
            stops += usize::from(out.stopped);
            late_errors += usize::from(out.error.is_some());
        }
        stored += usize::from(!mem.writes.is_empty());
        let allowed = if topa {
            described_regions(&mut mem, &TABLES)
        } else {
            let mask = (mask_ptrs | 0x7F) & 0xFFFF_FFFF;
            vec![(base & !mask, mask + 1)]
        };
        for &(addr, len) in &mem.writes {
            assert!(
                allowed.iter().any(|&(s, l)| addr >= s && addr + len as u64 <= s + l),
                "round {round}: store {addr:#x}+{len} outside every described region"
            );
            assert!(addr >= 0x10000, "round {round}: store {addr:#x} hit a table page");
        }
    }
    eprintln!("stored {stored} pmis {pmis} stops {stops} late errors {late_errors}");
    assert!(stored > 600 && pmis > 100 && stops > 40 && late_errors > 100);
}

#[test]
fn single_output_region_topa_pmi_comes_before_the_region_fills() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), end(0x1000)]);
    let mut u = OutputUnit::new(single_entry_caps());
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    // 4 KiB region: the PMI is due at 4096 - 512 = 3584 bytes, not at the wrap.
    assert!(!u.write(&mut mem, &[1; 3583]).pmi);
    assert!(u.write(&mut mem, &[1; 1]).pmi);
    assert!(!u.write(&mut mem, &[1; 100]).pmi);
    assert_eq!(u.output_mask_ptrs(), ptrs(0, 3684));
}

// ---------------------------------------------------------------------------------------------
// Held-back output (issue 13): `quiet_room` bytes can be stored later in one piece with the same
// outcome; one more byte is an event.

#[test]
fn quiet_room_ends_one_byte_before_an_int_region_fills() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x2000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), region(0x11000, 0, 0), end(0x1000)]);
    let mut u = skylake();
    assert_eq!(u.quiet_room(), 0, "idle unit: nothing may be held back");
    u.start(true, 0x1000, ptrs(0, 96), &mut mem).unwrap();
    assert_eq!(u.quiet_room(), 4096 - 96 - 1);
    assert_eq!(u.write(&mut mem, &vec![1; 4096 - 96 - 1]), done(4096 - 96 - 1), "quiet bytes: no event");
    assert_eq!(u.quiet_room(), 0);
    assert!(u.write(&mut mem, &[2]).pmi, "the byte after the quiet room fills the INT region");
    assert_eq!(u.quiet_room(), 4095, "next region, no INT: still ends before the next entry load");
}

#[test]
fn quiet_room_of_a_single_range_is_unbounded_and_of_a_stopped_unit_zero() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x10000, 0x1000).add_ram(0x1000, 0x1000);
    let mut u = skylake();
    u.start(false, 0x10000, 0xFF, &mut mem).unwrap();
    assert_eq!(u.quiet_room(), u64::MAX, "a single range wraps without an event");
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, STOP), end(0x1000)]);
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    assert!(u.write(&mut mem, &[0; 4096]).stopped);
    assert_eq!(u.quiet_room(), 0);
}

#[test]
fn quiet_room_of_a_single_output_region_table_ends_before_the_early_pmi_mark() {
    let mut mem = SparseMemory::new();
    mem.add_ram(0x1000, 0x1000).add_ram(0x10000, 0x1000);
    put_table(&mut mem, 0x1000, &[region(0x10000, 0, INT), end(0x1000)]);
    let mut u = OutputUnit::new(single_entry_caps());
    u.start(true, 0x1000, ptrs(0, 0), &mut mem).unwrap();
    // The PMI comes when the fill crosses 4096 - 512.
    let quiet = u.quiet_room();
    assert_eq!(quiet, 4096 - 512 - 1);
    assert!(!u.write(&mut mem, &vec![1; quiet as usize]).pmi);
    assert!(u.write(&mut mem, &[2]).pmi);
}
