//! encode -> decode round trips: every packet kind with every IP compression, and whole
//! streams whose IPs go through last-IP compression on one side and decompression on the
//! other.

use pttrace_core::pt::decode::{Decoded, PacketDecoder};
use pttrace_core::pt::encode::{encode, encoded_len};
use pttrace_core::pt::last_ip::LastIp;
use pttrace_core::pt::packet::{ExecMode, IpCompression, IpPayload, Packet};

const COMPRESSIONS: [IpCompression; 6] = [
    IpCompression::Suppressed,
    IpCompression::Update16,
    IpCompression::Update32,
    IpCompression::Sext48,
    IpCompression::Update48,
    IpCompression::Full,
];

/// A payload exercising every transmitted bit pattern position for `c`.
fn payload_for(c: IpCompression) -> IpPayload {
    let bits = 8 * c.payload_len() as u32;
    let payload = if bits == 0 {
        0
    } else {
        0xfedc_ba98_7654_3210u64 & (u64::MAX >> (64 - bits))
    };
    IpPayload {
        compression: c,
        payload,
    }
}

fn sample_packets() -> Vec<Packet> {
    let mut v = vec![
        Packet::Pad,
        Packet::Psb,
        Packet::PsbEnd,
        Packet::Ovf,
        Packet::TraceStop,
        Packet::ModeExec {
            mode: ExecMode::Bit16,
            if_flag: false,
        },
        Packet::ModeExec {
            mode: ExecMode::Bit32,
            if_flag: true,
        },
        Packet::ModeExec {
            mode: ExecMode::Bit64,
            if_flag: false,
        },
        Packet::ModeTsx {
            in_tx: true,
            tx_abort: false,
        },
        Packet::ModeTsx {
            in_tx: false,
            tx_abort: true,
        },
        Packet::Pip {
            cr3: 0x000f_ffff_ffff_ffe0,
            nr: true,
        },
        Packet::Pip {
            cr3: 0x1000,
            nr: false,
        },
        Packet::Cbr { ratio: 0x2a },
        Packet::Tsc {
            tsc: 0x00ff_ffff_ffff_ffff,
        },
        Packet::Mtc { ctc: 0xff },
        Packet::Tma {
            ctc: 0xffff,
            fast_counter: 0x1ff,
        },
    ];
    for count in 1..=6u8 {
        for bits in [0u8, 0x3f >> (6 - count), 0x2a & (0x3f >> (6 - count))] {
            v.push(Packet::Tnt { bits, count });
        }
    }
    for count in 1..=47u8 {
        v.push(Packet::TntLong {
            bits: 0x5555_5555_5555 & ((1 << count) - 1),
            count,
        });
    }
    for shift in 0..64 {
        v.push(Packet::Cyc {
            value: 1u64 << shift,
        });
        v.push(Packet::Cyc {
            value: u64::MAX >> shift,
        });
    }
    for c in COMPRESSIONS {
        let p = payload_for(c);
        v.extend([
            Packet::Tip(p),
            Packet::TipPge(p),
            Packet::TipPgd(p),
            Packet::Fup(p),
        ]);
    }
    v
}

#[test]
fn every_packet_and_every_ip_compression_survives_encode_then_decode() {
    for p in sample_packets() {
        let mut bytes = Vec::new();
        encode(&p, &mut bytes);
        assert_eq!(bytes.len(), encoded_len(&p), "{p:?}");
        let got: Vec<_> = PacketDecoder::new(&bytes).collect();
        assert_eq!(
            got,
            [Ok(Decoded {
                offset: 0,
                len: bytes.len(),
                packet: p
            })],
            "{p:?}"
        );
    }
}

#[test]
fn concatenated_stream_decodes_packet_by_packet_at_the_right_offsets() {
    let packets = sample_packets();
    let mut bytes = Vec::new();
    let mut offsets = Vec::new();
    for p in &packets {
        offsets.push(bytes.len());
        encode(p, &mut bytes);
    }
    let decoded: Vec<Decoded> = PacketDecoder::new(&bytes).map(Result::unwrap).collect();
    assert_eq!(decoded.len(), packets.len());
    for ((d, p), off) in decoded.iter().zip(&packets).zip(&offsets) {
        assert_eq!((d.offset, d.packet), (*off, *p));
    }
}

#[test]
fn ips_compressed_by_last_ip_are_reconstructed_by_a_decoder_last_ip() {
    let ips = [
        0x7fff_1234_5678u64,
        0x7fff_1234_0000,
        0x7fff_0000_1000,
        0x401000,
        0x401234,
        0xffff_ffff_8100_0000,
        0xffff_ffff_8100_0042,
        0x1234_8000_0000_0000,
        0x1234_8000_0000_0010,
        0x1234_0000_0000_0000,
        0,
        u64::MAX,
    ];
    let mut enc = LastIp::new();
    let mut bytes = Vec::new();
    encode(&Packet::Psb, &mut bytes);
    for (i, &ip) in ips.iter().enumerate() {
        if i == 6 {
            encode(&Packet::Psb, &mut bytes);
            enc.reset();
        }
        encode(&Packet::Tip(enc.compress(ip)), &mut bytes);
    }
    let mut dec = LastIp::new();
    let mut got = Vec::new();
    for d in PacketDecoder::new(&bytes) {
        match d.unwrap().packet {
            Packet::Psb => dec.reset(),
            Packet::Tip(p) => got.push(dec.decompress(p).unwrap()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(got, ips);
}

#[test]
fn every_forced_compression_round_trips_through_the_wire() {
    let last = 0x7fff_1234_0000u64;
    for ip in [
        0x7fff_1234_5678u64,
        0x7fff_8765_4321,
        0x7abc_0000_0000,
        0xffff_ffff_8100_0000,
        0x8000_7fff_1234_0000,
    ] {
        for c in COMPRESSIONS.into_iter().skip(1) {
            let mut enc = LastIp::new();
            enc.compress(last);
            let Some(p) = enc.compress_with(ip, c) else {
                continue;
            };
            let mut bytes = Vec::new();
            encode(&Packet::Fup(p), &mut bytes);
            let d = PacketDecoder::new(&bytes).next().unwrap().unwrap();
            let Packet::Fup(q) = d.packet else { panic!() };
            let mut dec = LastIp::new();
            dec.compress(last);
            assert_eq!(dec.decompress(q), Some(ip), "{ip:#x} as {c:?}");
        }
    }
}
