//! RFLAGS (SDM Vol. 1 §3.4.3 "EFLAGS Register") as QEMU's TCG holds it, for the places where the
//! plugin writes it back through the gdbstub `eflags` register.
//!
//! TCG keeps the status flags CF, PF, AF, ZF, SF, OF outside the EFLAGS word (lazily, as
//! CC_SRC/CC_DST/CC_OP) and DF as `env->df`; `env->eflags` holds the system flags and bit 1.
//! Every RFLAGS image TCG builds (PUSHF, an interrupt or exception frame, SYSCALL's R11) is
//! `env->eflags | status flags | DF` (`cpu_compute_eflags`, `helper_read_eflags`: an OR). A
//! gdbstub write stores the word as it is (`env->eflags = value`), so a status flag or DF
//! written there stays set in every later image until something clears it in the word (SYSCALL
//! with IA32_FMASK, another gdbstub write); IRET and POPF do not (their update masks hold only
//! system flags). Writing a pushed frame's RFLAGS back as it is therefore makes later frames
//! carry flags the code never set: in the Linux guest an NMI after RDPMC's completion returned to
//! user code with ZF = 1, a JA went the wrong way and the process died (README "Core 2
//! profile"). Only the system part of an image may be written; the status flags and DF of the
//! interrupted code are still in TCG's lazy state when the write undoes an event delivery
//! (delivery computes the image but does not change that state).

/// RFLAGS[0] CF, [2] PF, [4] AF, [6] ZF, [7] SF, [11] OF: the status flags.
pub const STATUS_FLAGS: u64 = 0x8D5;
/// RFLAGS[10] DF.
pub const DF: u64 = 1 << 10;

/// The word to write through the gdbstub `eflags` register to restore the RFLAGS image `rflags`
/// (e.g. from an interrupt frame) when TCG's status flags and DF already hold that image's
/// values: its system flags, IF, TF, IOPL, NT, RF, VM, AC, VIF, VIP, ID and bit 1.
pub fn tcg_eflags_word(rflags: u64) -> u64 {
    rflags & !(STATUS_FLAGS | DF)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// QEMU's `cpu_compute_eflags`: the image TCG pushes.
    fn image(word: u64, status: u64, df: bool) -> u64 {
        word | status | if df { DF } else { 0 }
    }

    #[test]
    fn a_restored_frame_leaves_no_status_flag_or_df_in_later_images() {
        // Kernel code with IF = 0 runs RDPMC with ZF, PF and CF set and DF = 1 (the Linux NMI
        // handler's frames had 10046H); the #UD delivery pushes the image, the plugin undoes it.
        let word_before = 0x2 | (1 << 16); // bit 1, RF
        let frame = image(word_before, 0x45, true);
        assert_eq!(frame, 0x10447);
        let written = tcg_eflags_word(frame);
        // Right after: the lazy state still holds the interrupted code's flags.
        assert_eq!(image(written, 0x45, true), frame);
        // Later the code clears ZF, PF, CF and DF: an NMI frame (or PUSHF) must show them clear.
        assert_eq!(image(written, 0, false), word_before);
        // Written as it is, the frame's ZF/PF/CF/DF would stay in every later image.
        assert_eq!(image(frame, 0, false), 0x10447);
    }

    #[test]
    fn system_flags_survive() {
        let all_system = 0x2 | (1 << 8) | (1 << 9) | (3 << 12) | (1 << 14) | (1 << 16) | (1 << 17) | (1 << 18) | (1 << 19) | (1 << 20) | (1 << 21);
        assert_eq!(tcg_eflags_word(all_system | STATUS_FLAGS | DF), all_system);
    }
}
