//! Thin safe wrapper over libipt's packet decoder (`pt_pkt_*`) through
//! `libipt-sys`.
//!
//! Why not `libipt::packet::PacketDecoder`? Its `Packet` conversion hits
//! `unreachable!("invalid packet type")` for packet types the crate does not
//! know but libipt 2.1 decodes (CFE `02 13`, EVD `02 53`), i.e. a crafted or
//! corrupted trace panics the tool; and `Tnt64::payload()` returns only 8 of
//! the up to 47 TNT bits. Here we get the raw `pt_packet`.

use std::mem;
use std::ptr::NonNull;

use libipt::error::{PtError, PtErrorCode};
use libipt_sys as sys;

use crate::insn_ffi::pt_error;

pub use sys::pt_packet as RawPacket;

fn check(code: i32) -> Result<(), PtError> {
    if code < 0 {
        Err(pt_error(code))
    } else {
        Ok(())
    }
}

/// Owned `pt_packet_decoder` over a borrowed trace buffer.
pub struct RawPacketDecoder<'t> {
    dec: NonNull<sys::pt_packet_decoder>,
    _trace: std::marker::PhantomData<&'t [u8]>,
}

impl<'t> RawPacketDecoder<'t> {
    pub fn new(trace: &'t [u8]) -> Result<Self, PtError> {
        if trace.is_empty() {
            return Err(PtError::from(PtErrorCode::Eos));
        }
        // SAFETY: all-zero is the documented initial state (pt_config_init).
        let mut config: sys::pt_config = unsafe { mem::zeroed() };
        config.size = mem::size_of::<sys::pt_config>();
        // libipt never writes to the trace buffer; `*mut` is an API artefact.
        config.begin = trace.as_ptr() as *mut u8;
        // SAFETY: one-past-the-end of the slice.
        config.end = unsafe { config.begin.add(trace.len()) };
        // SAFETY: config is valid; libipt copies it.
        let dec = NonNull::new(unsafe { sys::pt_pkt_alloc_decoder(&config) })
            .ok_or_else(|| PtError::from(PtErrorCode::Nomem))?;
        Ok(RawPacketDecoder {
            dec,
            _trace: std::marker::PhantomData,
        })
    }

    pub fn sync_forward(&mut self) -> Result<(), PtError> {
        check(unsafe { sys::pt_pkt_sync_forward(self.dec.as_ptr()) })
    }

    pub fn offset(&self) -> Result<u64, PtError> {
        let mut off = 0;
        check(unsafe { sys::pt_pkt_get_offset(self.dec.as_ptr(), &mut off) }).map(|_| off)
    }

    pub fn sync_offset(&self) -> Result<u64, PtError> {
        let mut off = 0;
        check(unsafe { sys::pt_pkt_get_sync_offset(self.dec.as_ptr(), &mut off) }).map(|_| off)
    }

    /// `pt_pkt_next`: decode the packet at the current position.
    pub fn next_packet(&mut self) -> Result<RawPacket, PtError> {
        // SAFETY: zeroed pt_packet is a valid out-parameter.
        let mut pkt: sys::pt_packet = unsafe { mem::zeroed() };
        check(unsafe {
            sys::pt_pkt_next(
                self.dec.as_ptr(),
                &mut pkt,
                mem::size_of::<sys::pt_packet>(),
            )
        })?;
        Ok(pkt)
    }
}

impl Drop for RawPacketDecoder<'_> {
    fn drop(&mut self) {
        unsafe { sys::pt_pkt_free_decoder(self.dec.as_ptr()) }
    }
}
