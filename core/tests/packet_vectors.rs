//! Exact wire bytes of every packet type, checked in both directions.
//!
//! Vectors follow the byte tables of Linux perf's intel-pt-pkt-decoder test and libipt's
//! packet semantics (SDM Vol. 3C §33.4.2).

use pttrace_core::pt::decode::decode_packet;
use pttrace_core::pt::encode::{encode_lossy, encoded_len, try_encode};
use pttrace_core::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};

/// Encode `p`, compare with `bytes`, and decode `bytes` back to `p` with the right length.
fn check(p: Packet, bytes: &[u8]) {
    let mut out = Vec::new();
    try_encode(&p, &mut out).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    assert_eq!(out, bytes, "encoding of {p:?}");
    assert_eq!(encoded_len(&p), bytes.len(), "encoded_len of {p:?}");
    let d = decode_packet(bytes, 0).unwrap_or_else(|e| panic!("{bytes:02x?}: {e}"));
    assert_eq!(
        (d.len, d.packet),
        (bytes.len(), p),
        "decoding of {bytes:02x?}"
    );
}

fn ip(compression: IpCompression, payload: u64) -> IpPayload {
    IpPayload {
        compression,
        payload,
    }
}

#[test]
fn pad_is_a_single_zero_byte() {
    check(Packet::Pad, &[0x00]);
}

#[test]
fn psb_is_02_82_eight_times() {
    check(Packet::Psb, &[0x02, 0x82].repeat(8));
}

#[test]
fn psbend_ovf_and_tracestop_are_two_byte_extended_packets() {
    check(Packet::PsbEnd, &[0x02, 0x23]);
    check(Packet::Ovf, &[0x02, 0xf3]);
    check(Packet::TraceStop, &[0x02, 0x83]);
}

#[test]
fn short_tnt_with_one_to_six_results() {
    check(
        Packet::Tnt {
            bits: 0b0,
            count: 1,
        },
        &[0x04],
    );
    check(
        Packet::Tnt {
            bits: 0b1,
            count: 1,
        },
        &[0x06],
    );
    check(
        Packet::Tnt {
            bits: 0b10,
            count: 2,
        },
        &[0x0c],
    );
    check(
        Packet::Tnt {
            bits: 0b101,
            count: 3,
        },
        &[0x1a],
    );
    check(
        Packet::Tnt {
            bits: 0b1001,
            count: 4,
        },
        &[0x32],
    );
    check(
        Packet::Tnt {
            bits: 0b1_0000,
            count: 5,
        },
        &[0x60],
    );
    check(Packet::Tnt { bits: 0, count: 6 }, &[0x80]);
    check(
        Packet::Tnt {
            bits: 0b11_1111,
            count: 6,
        },
        &[0xfe],
    );
}

#[test]
fn long_tnt_has_a_48_bit_field_with_stop_bit() {
    check(
        Packet::TntLong { bits: 0, count: 1 },
        &[0x02, 0xa3, 0x02, 0, 0, 0, 0, 0],
    );
    check(
        Packet::TntLong { bits: 1, count: 1 },
        &[0x02, 0xa3, 0x03, 0, 0, 0, 0, 0],
    );
    check(
        Packet::TntLong { bits: 0, count: 47 },
        &[0x02, 0xa3, 0, 0, 0, 0, 0, 0x80],
    );
    check(
        Packet::TntLong {
            bits: (1 << 47) - 1,
            count: 47,
        },
        &[0x02, 0xa3, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
    );
}

/// perf's table: each IP packet kind with every IPBytes value, payload bytes 1, 2, 3, ...
#[test]
fn ip_packets_with_every_ipbytes_value() {
    type MakeIpPacket = fn(IpPayload) -> Packet;
    let kinds: [(MakeIpPacket, u8); 4] = [
        (Packet::Tip, 0x0d),
        (Packet::TipPge, 0x11),
        (Packet::TipPgd, 0x01),
        (Packet::Fup, 0x1d),
    ];
    for (make, opc) in kinds {
        check(make(IpPayload::SUPPRESSED), &[opc]);
        check(
            make(ip(IpCompression::Update16, 0x201)),
            &[0x20 | opc, 1, 2],
        );
        check(
            make(ip(IpCompression::Update32, 0x4030201)),
            &[0x40 | opc, 1, 2, 3, 4],
        );
        check(
            make(ip(IpCompression::Sext48, 0x60504030201)),
            &[0x60 | opc, 1, 2, 3, 4, 5, 6],
        );
        check(
            make(ip(IpCompression::Update48, 0x60504030201)),
            &[0x80 | opc, 1, 2, 3, 4, 5, 6],
        );
        check(
            make(ip(IpCompression::Full, 0x807060504030201)),
            &[0xc0 | opc, 1, 2, 3, 4, 5, 6, 7, 8],
        );
    }
}

#[test]
fn pip_carries_cr3_bits_51_5_and_the_nr_bit() {
    // perf: 02 43 02 04 06 08 0a 0c -> field 0xC0A08060402, CR3 = (field >> 1) << 5
    check(
        Packet::Pip {
            cr3: 0xC0A08060402 << 4,
            nr: false,
        },
        &[0x02, 0x43, 2, 4, 6, 8, 10, 12],
    );
    check(
        Packet::Pip {
            cr3: 0xC0A08060402 << 4,
            nr: true,
        },
        &[0x02, 0x43, 3, 4, 6, 8, 10, 12],
    );
    // 0x12c000 >> 5 << 1 = 0x12c00
    check(
        Packet::Pip {
            cr3: 0x12c000,
            nr: false,
        },
        &[0x02, 0x43, 0x00, 0x2c, 0x01, 0, 0, 0],
    );
}

#[test]
fn pip_drops_cr3_bits_4_0() {
    let mut out = Vec::new();
    try_encode(
        &Packet::Pip {
            cr3: 0x12c01f,
            nr: false,
        },
        &mut out,
    )
    .unwrap();
    assert_eq!(out, [0x02, 0x43, 0x00, 0x2c, 0x01, 0, 0, 0]);
}

#[test]
fn mode_exec_reports_cs_l_and_cs_d() {
    check(
        Packet::ModeExec {
            mode: ExecMode::Bit16,
            if_flag: false,
        },
        &[0x99, 0x00],
    );
    check(
        Packet::ModeExec {
            mode: ExecMode::Bit64,
            if_flag: false,
        },
        &[0x99, 0x01],
    );
    check(
        Packet::ModeExec {
            mode: ExecMode::Bit32,
            if_flag: false,
        },
        &[0x99, 0x02],
    );
    check(
        Packet::ModeExec {
            mode: ExecMode::Bit64,
            if_flag: true,
        },
        &[0x99, 0x05],
    );
}

#[test]
fn mode_tsx_is_leaf_one() {
    check(
        Packet::ModeTsx {
            in_tx: false,
            tx_abort: false,
        },
        &[0x99, 0x20],
    );
    check(
        Packet::ModeTsx {
            in_tx: true,
            tx_abort: false,
        },
        &[0x99, 0x21],
    );
    check(
        Packet::ModeTsx {
            in_tx: false,
            tx_abort: true,
        },
        &[0x99, 0x22],
    );
}

#[test]
fn cbr_tsc_mtc_and_tma_timing_packets() {
    check(Packet::Cbr { ratio: 0x12 }, &[0x02, 0x03, 0x12, 0x00]);
    check(
        Packet::Tsc {
            tsc: 0x7060504030201,
        },
        &[0x19, 1, 2, 3, 4, 5, 6, 7],
    );
    check(Packet::Mtc { ctc: 0x12 }, &[0x59, 0x12]);
    check(
        Packet::Tma {
            ctc: 0,
            fast_counter: 0,
        },
        &[0x02, 0x73, 0, 0, 0, 0, 0],
    );
    check(
        Packet::Tma {
            ctc: 0x201,
            fast_counter: 0,
        },
        &[0x02, 0x73, 1, 2, 0, 0, 0],
    );
    check(
        Packet::Tma {
            ctc: 0,
            fast_counter: 0x1ff,
        },
        &[0x02, 0x73, 0, 0, 0, 0xff, 1],
    );
    check(
        Packet::Tma {
            ctc: 0xc080,
            fast_counter: 0x1ff,
        },
        &[0x02, 0x73, 0x80, 0xc0, 0, 0xff, 1],
    );
}

#[test]
fn cyc_variable_length_values_from_perf_table() {
    let table: &[(u64, &[u8])] = &[
        (0, &[0x03]),
        (1, &[0x0b]),
        (0x1f, &[0xfb]),
        (0x20, &[0x07, 0x02]),
        (0xfff, &[0xff, 0xfe]),
        (0x1000, &[0x07, 0x01, 0x02]),
        (0x7ffff, &[0xff, 0xff, 0xfe]),
        (0x80000, &[0x07, 1, 1, 2]),
        (0x3ffffff, &[0xff, 0xff, 0xff, 0xfe]),
        (0x4000000, &[0x07, 1, 1, 1, 2]),
        (0x1ffffffff, &[0xff, 0xff, 0xff, 0xff, 0xfe]),
        (0x200000000, &[0x07, 1, 1, 1, 1, 2]),
        (0xffffffffff, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]),
        (0x10000000000, &[0x07, 1, 1, 1, 1, 1, 2]),
        (0x7fffffffffff, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]),
        (0x800000000000, &[0x07, 1, 1, 1, 1, 1, 1, 2]),
        (
            0x3fffffffffffff,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
        ),
        (0x40000000000000, &[0x07, 1, 1, 1, 1, 1, 1, 1, 2]),
        (
            0x1fffffffffffffff,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
        ),
        (0x2000000000000000, &[0x07, 1, 1, 1, 1, 1, 1, 1, 1, 2]),
        (
            u64::MAX,
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0e],
        ),
    ];
    for &(value, bytes) in table {
        check(Packet::Cyc { value }, bytes);
    }
}

#[test]
fn lossy_encoding_of_valid_packets_equals_exact_encoding() {
    let p = Packet::Tip(ip(IpCompression::Update32, 0x4030201));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    try_encode(&p, &mut a).unwrap();
    encode_lossy(&p, &mut b);
    assert_eq!(a, b);
}
