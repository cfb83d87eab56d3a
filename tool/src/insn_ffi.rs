//! Thin safe wrapper over libipt's instruction flow decoder (`pt_insn_*`)
//! through `libipt-sys`.
//!
//! Why not `libipt::insn::InsnDecoder`? Its `decode_next()` discards the
//! instruction when `pt_insn_next` returns an error. libipt fills in the
//! instruction even on error when it was decoded before the failure (e.g.
//! `-pte_eos` at the end of a trace that stops without TIP.PGD: the last
//! conditional branch / syscall executed, but its successor is unknown), and
//! ptxed prints it whenever `insn.iclass != ptic_error`. We want exactly the
//! ptxed instruction sequence, so we call `pt_insn_next` directly.
//! (Also: the crate's `Event::event_type()` and `Insn::class()/mode()`
//! panic on values they do not know, e.g. libipt 2.1's `ptev_iflags`.)

use std::ffi::c_void;
use std::mem;
use std::ptr::NonNull;

use libipt::error::{PtError, PtErrorCode};
use libipt::status::Status;
use libipt_sys as sys;

use crate::code_image::ThreadView;

/// Convert a negative libipt return value to a `PtError` (with libipt's
/// `pt_errstr` message).
pub fn pt_error(code: i32) -> PtError {
    let c = code.unsigned_abs() as i32;
    match PtErrorCode::try_from(c) {
        Ok(c) => PtError::from(c),
        Err(_) => PtError::from(PtErrorCode::Internal),
    }
}

fn status(code: i32) -> Result<Status, PtError> {
    if code < 0 {
        Err(pt_error(code))
    } else {
        Ok(Status::from_bits_retain(code as u32))
    }
}

/// State behind the image read-memory callback.
struct CallbackCtx {
    view: ThreadView,
}

/// libipt `read_memory_callback_t`: copy up to `size` bytes at `ip` from the
/// sparse code image. Returns the number of bytes copied (a short read at a
/// segment end is fine: libipt then asks for the rest at the next address)
/// or `-pte_nomap`.
unsafe extern "C" fn read_memory(
    buffer: *mut u8,
    size: usize,
    _asid: *const sys::pt_asid,
    ip: u64,
    context: *mut c_void,
) -> i32 {
    if buffer.is_null() || context.is_null() {
        return -(PtErrorCode::Internal as i32);
    }
    // SAFETY: `context` is the `CallbackCtx` boxed in `RawInsnDecoder`,
    // alive for as long as the decoder; `buffer` has room for `size` bytes.
    let ctx = unsafe { &mut *(context as *mut CallbackCtx) };
    let buf = unsafe { std::slice::from_raw_parts_mut(buffer, size) };
    match ctx.view.read(ip, buf) {
        0 => -(PtErrorCode::Nomap as i32),
        n => n.min(i32::MAX as usize) as i32,
    }
}

/// Result of one `pt_insn_next` call.
pub struct Next {
    /// IP of the instruction libipt decoded, present whenever
    /// `iclass != ptic_error` — also when `result` is an error (ptxed rule).
    pub ip: Option<u64>,
    /// The instruction is a change of flow (any `pt_insn_class` other than `ptic_other`).
    pub branch: bool,
    pub result: Result<Status, PtError>,
}

/// An event fetched with `pt_insn_event`.
#[derive(Debug, Clone, Copy)]
pub struct RawEvent {
    /// Raw `pt_event_type`.
    pub kind: u32,
    /// The power event (`ptev_pwre`, `ptev_pwrx`, `ptev_exstop`, `ptev_mwait`) in ptxed's
    /// `--event` notation without the brackets (e.g. `pwre c1.0`, `exstop, ip: 1033b7`,
    /// `pwrx int: c1 (c1)`), or the Event Trace event (`interrupt 40, ip: ...`,
    /// `interrupt e, cr2: ..., ip: ...`, `iret, ip: ...`); None for other events.
    pub text: Option<EventText>,
}

/// A short description of an event (ptxed notation), stored inline (no allocation per event).
#[derive(Debug, Clone, Copy)]
pub struct EventText {
    buf: [u8; 64],
    len: usize,
}

impl EventText {
    fn new(args: std::fmt::Arguments) -> Self {
        use std::io::Write;
        let mut buf = [0u8; 64];
        let mut cur = std::io::Cursor::new(&mut buf[..]);
        let _ = cur.write_fmt(args);
        let len = cur.position() as usize;
        EventText { buf, len }
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

/// ptxed's notation of the power events (ptxed.c print_event); C-states print as the
/// MWAIT-hint encoding + 1.
fn event_text(ev: &sys::pt_event) -> Option<EventText> {
    let ip = |ip: u64| -> String {
        if ev.ip_suppressed() != 0 {
            String::new()
        } else {
            format!(", ip: {ip:x}")
        }
    };
    // SAFETY: the union member read is the one `type_` selects.
    unsafe {
        match ev.type_ {
            sys::pt_event_type_ptev_pwre => {
                let p = ev.variant.pwre;
                Some(EventText::new(format_args!(
                    "pwre c{}.{}{}",
                    (p.state + 1) & 0xF,
                    (p.sub_state + 1) & 0xF,
                    if p.hw() != 0 { ", hw" } else { "" }
                )))
            }
            sys::pt_event_type_ptev_pwrx => {
                let p = ev.variant.pwrx;
                let wr = match (p.interrupt(), p.store(), p.autonomous()) {
                    (1, 0, 0) => "int",
                    (0, 1, 0) => "st",
                    (0, 0, 1) => "hw",
                    _ => "bad",
                };
                Some(EventText::new(format_args!(
                    "pwrx {wr}: c{} (c{})",
                    (p.last + 1) & 0xF,
                    (p.deepest + 1) & 0xF
                )))
            }
            sys::pt_event_type_ptev_exstop => {
                Some(EventText::new(format_args!("exstop{}", ip(ev.variant.exstop.ip))))
            }
            // Event Trace (CFE/EVD): the vector, CR2 of a page fault, the IP the CFE bound to.
            sys::pt_event_type_ptev_interrupt => {
                let i = ev.variant.interrupt;
                let cr2 = if i.has_cr2() != 0 { format!(", cr2: {:x}", i.cr2) } else { String::new() };
                Some(EventText::new(format_args!("interrupt {:x}{cr2}{}", i.vector, ip(i.ip))))
            }
            sys::pt_event_type_ptev_iret => Some(EventText::new(format_args!("iret{}", ip(ev.variant.iret.ip)))),
            sys::pt_event_type_ptev_iflags => {
                let f = ev.variant.iflags;
                Some(EventText::new(format_args!("if {}{}", f.iflag(), ip(f.ip))))
            }
            sys::pt_event_type_ptev_mwait => {
                let m = ev.variant.mwait;
                Some(EventText::new(format_args!("mwait {:x} {:x}{}", m.hints, m.ext, ip(m.ip))))
            }
            _ => None,
        }
    }
}

impl RawEvent {
    pub fn is_overflow(&self) -> bool {
        self.kind == sys::pt_event_type_ptev_overflow
    }
}

/// Owned `pt_insn_decoder` over a borrowed trace buffer, memory from a
/// thread's view of `code.img` (`ThreadView`) via the default image's read callback.
pub struct RawInsnDecoder<'t> {
    dec: NonNull<sys::pt_insn_decoder>,
    _ctx: Box<CallbackCtx>,
    _trace: std::marker::PhantomData<&'t [u8]>,
}

impl<'t> RawInsnDecoder<'t> {
    /// `cpu` = (family, model, stepping) of an Intel CPU for errata.
    /// `iflags`: the trace was taken with IA32_RTIT_CTL.EventEn (meta.txt event_trace=1): set
    /// libipt's `enable_iflags_events`, which reports the RFLAGS.IF of MODE.Exec as events.
    pub fn new(
        trace: &'t [u8],
        view: ThreadView,
        cpu: Option<(u16, u8, u8)>,
        iflags: bool,
    ) -> Result<Self, PtError> {
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
        if iflags {
            // SAFETY: the union's `insn` member is the one the instruction flow decoder reads.
            unsafe { config.flags.variant.insn.set_enable_iflags_events(1) };
        }
        if let Some((family, model, stepping)) = cpu {
            config.cpu = sys::pt_cpu {
                vendor: sys::pt_cpu_vendor_pcv_intel,
                family,
                model,
                stepping,
            };
            // SAFETY: valid pointers to local structs.
            let r = unsafe { sys::pt_cpu_errata(&mut config.errata, &config.cpu) };
            if r < 0 {
                return Err(pt_error(r));
            }
        }
        // SAFETY: config is valid; libipt copies it.
        let dec = NonNull::new(unsafe { sys::pt_insn_alloc_decoder(&config) })
            .ok_or_else(|| PtError::from(PtErrorCode::Nomem))?;
        let mut ctx = Box::new(CallbackCtx { view });
        let ctx_ptr = &mut *ctx as *mut CallbackCtx as *mut c_void;
        let this = RawInsnDecoder {
            dec,
            _ctx: ctx,
            _trace: std::marker::PhantomData,
        };
        // SAFETY: the default image belongs to the decoder; ctx outlives it
        // (dropped after the decoder is freed, see Drop).
        let r = unsafe {
            let image = sys::pt_insn_get_image(this.dec.as_ptr());
            sys::pt_image_set_callback(image, Some(read_memory), ctx_ptr)
        };
        if r < 0 {
            return Err(pt_error(r));
        }
        Ok(this)
    }

    /// The memory libipt reads from: advance it to the thread's instruction count before each
    /// `next_insn` (code versions, issue 19).
    pub fn view_mut(&mut self) -> &mut ThreadView {
        &mut self._ctx.view
    }

    pub fn sync_forward(&mut self) -> Result<Status, PtError> {
        status(unsafe { sys::pt_insn_sync_forward(self.dec.as_ptr()) })
    }

    pub fn offset(&self) -> Result<u64, PtError> {
        let mut off = 0;
        status(unsafe { sys::pt_insn_get_offset(self.dec.as_ptr(), &mut off) }).map(|_| off)
    }

    pub fn sync_offset(&self) -> Result<u64, PtError> {
        let mut off = 0;
        status(unsafe { sys::pt_insn_get_sync_offset(self.dec.as_ptr(), &mut off) }).map(|_| off)
    }

    /// `pt_insn_event`: fetch the next pending event.
    pub fn event(&mut self) -> Result<(RawEvent, Status), PtError> {
        // SAFETY: zeroed pt_event is a valid out-parameter.
        let mut ev: sys::pt_event = unsafe { mem::zeroed() };
        let st = status(unsafe {
            sys::pt_insn_event(self.dec.as_ptr(), &mut ev, mem::size_of::<sys::pt_event>())
        })?;
        Ok((RawEvent { kind: ev.type_, text: event_text(&ev) }, st))
    }

    /// `pt_insn_next`: the next instruction, see [`Next`].
    pub fn next_insn(&mut self) -> Next {
        // SAFETY: zeroed pt_insn (iclass = ptic_error) is a valid out-parameter.
        let mut insn: sys::pt_insn = unsafe { mem::zeroed() };
        let r = unsafe {
            sys::pt_insn_next(self.dec.as_ptr(), &mut insn, mem::size_of::<sys::pt_insn>())
        };
        let ip = (insn.iclass != sys::pt_insn_class_ptic_error).then_some(insn.ip);
        let branch = ip.is_some() && insn.iclass != sys::pt_insn_class_ptic_other;
        Next {
            ip,
            branch,
            result: status(r),
        }
    }
}

impl Drop for RawInsnDecoder<'_> {
    fn drop(&mut self) {
        // Frees the decoder and its default image; `_ctx` is dropped after.
        unsafe { sys::pt_insn_free_decoder(self.dec.as_ptr()) }
    }
}
