//! The few GLib functions the plugin calls directly (QEMU links GLib; the qemu-plugin crate's
//! wrappers around byte arrays are not usable, see guest.rs and regs.rs).

use qemu_plugin::sys::{GArray, GByteArray};

unsafe extern "C" {
    pub fn g_byte_array_new() -> *mut GByteArray;
    pub fn g_byte_array_free(array: *mut GByteArray, free_segment: bool) -> *mut u8;
    pub fn g_byte_array_set_size(array: *mut GByteArray, len: u32) -> *mut GByteArray;
    pub fn g_array_free(array: *mut GArray, free_segment: bool) -> *mut u8;
}
