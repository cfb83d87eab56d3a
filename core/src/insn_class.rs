//! Control-flow classes of x86 instructions as Intel PT sees them
//! (SDM Vol. 3C §33.2.1 "Change of Flow Instruction (COFI) Tracing", Table 33-1).
//!
//! Classification is done once per instruction at translation time with iced-x86's decoder,
//! so the execution-time hot path only looks at a precomputed `BranchKind`.

use crate::pt::packet::ExecMode;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind};

/// Far transfers (§33.2.1.3) by instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FarKind {
    Syscall,
    Sysret,
    Sysenter,
    Sysexit,
    Iret,
    FarJmp,
    FarCall,
    FarRet,
}

/// The COFI class of one instruction, with its direct target where it has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BranchKind {
    /// Not a change of flow: execution continues at the next instruction.
    None,
    /// Conditional branch (Jcc, J*CXZ, LOOP*): one TNT bit.
    Conditional { target: u64 },
    /// Unconditional direct JMP: no packet.
    DirectJump { target: u64 },
    /// Direct near CALL: no packet; pushes NLIP on the RET-compression stack unless the
    /// displacement is 0 (`call next; pop` idiom).
    DirectCall { target: u64 },
    /// Indirect near JMP: TIP(target).
    IndirectJump,
    /// Indirect near CALL: TIP(target), pushes NLIP.
    IndirectCall,
    /// Near RET: compressed to a TNT '1' or TIP(target).
    Return,
    /// Far transfer: TIP(target) (no FUP in Intel PT).
    Far(FarKind),
    /// INT n / INT3 / INTO / INT1: FUP(the instruction), then TIP(handler).
    SoftwareInterrupt,
    /// Instructions that always fault (UD2, UD0/UD1): execution does not continue after them.
    AlwaysFaults,
}

impl BranchKind {
    /// True for instructions that may change the IP to something other than the next instruction.
    pub fn is_cofi(self) -> bool {
        !matches!(self, BranchKind::None)
    }
}

/// A decoded instruction with the facts the tracer needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassifiedInsn {
    pub ip: u64,
    pub len: u8,
    pub kind: BranchKind,
    /// A REP/REPNE-prefixed string instruction: it may execute as several iterations but
    /// retires once.
    pub rep_string: bool,
}

impl ClassifiedInsn {
    /// Next linear instruction pointer (NLIP).
    pub fn nlip(&self) -> u64 {
        self.ip.wrapping_add(u64::from(self.len))
    }

    /// The same instruction executing `delta` bytes away from where it was classified (QEMU
    /// reuses PC-relative translations for the same physical code at another virtual address):
    /// its address and its relative branch targets move with it.
    pub fn relocated(self, delta: u64) -> Self {
        if delta == 0 {
            return self;
        }
        let kind = match self.kind {
            BranchKind::Conditional { target } => BranchKind::Conditional { target: target.wrapping_add(delta) },
            BranchKind::DirectJump { target } => BranchKind::DirectJump { target: target.wrapping_add(delta) },
            BranchKind::DirectCall { target } => BranchKind::DirectCall { target: target.wrapping_add(delta) },
            other => other,
        };
        ClassifiedInsn { ip: self.ip.wrapping_add(delta), kind, ..self }
    }
}

/// Instructions the full-system plugin must intercept (besides COFIs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SystemOp {
    /// CPUID: the plugin answers leaves 7 and 14H from the capability profile.
    Cpuid,
    /// RDMSR / WRMSR: the plugin owns the IA32_RTIT_* MSRs.
    Rdmsr,
    Wrmsr,
    /// MOV to CR3: ContextEn/PIP (Table 33-50).
    MovToCr3,
    /// LGDT: the GDT base is needed to read CS.L/CS.D for MODE.Exec.
    Lgdt,
    /// LIDT: the IDT base, to re-deliver a faulting RDPMC's #UD as #GP.
    Lidt,
    /// RDPMC: QEMU's TCG raises #UD for it; the plugin completes it from its PMU model.
    Rdpmc,
    /// RDTSC / RDTSCP: their results tell the plugin the guest's TSC (for TSC/MTC packets).
    Rdtsc,
    /// HLT: the unhalted-cycle counters stop until the processor wakes up.
    Hlt,
    /// CLI: clears RFLAGS.IF without ending QEMU's translation block; with Event Trace the
    /// change is reported at the instruction (MODE.Exec IF, FUP(NLIP)). Only instrumented by a
    /// profile with Event Trace.
    Cli,
}

/// The system operation of the instruction at the start of `bytes`, if any.
pub fn system_op(bytes: &[u8], bitness: u32) -> Option<SystemOp> {
    let mut dec = Decoder::new(bitness, bytes, DecoderOptions::NONE);
    let insn = dec.decode();
    if insn.is_invalid() {
        return None;
    }
    match insn.mnemonic() {
        Mnemonic::Cpuid => Some(SystemOp::Cpuid),
        Mnemonic::Rdmsr => Some(SystemOp::Rdmsr),
        Mnemonic::Wrmsr => Some(SystemOp::Wrmsr),
        Mnemonic::Lgdt => Some(SystemOp::Lgdt),
        Mnemonic::Lidt => Some(SystemOp::Lidt),
        Mnemonic::Rdpmc => Some(SystemOp::Rdpmc),
        Mnemonic::Rdtsc | Mnemonic::Rdtscp => Some(SystemOp::Rdtsc),
        Mnemonic::Hlt => Some(SystemOp::Hlt),
        Mnemonic::Cli => Some(SystemOp::Cli),
        Mnemonic::Mov if insn.op0_register() == iced_x86::Register::CR3 => Some(SystemOp::MovToCr3),
        _ => None,
    }
}

/// The instruction can change CS, CR0.PE or IA32_EFER.LMA (the registers behind MODE.Exec and
/// CPL) without being a far transfer or an event: MOV to CR0, LMSW, RSM, WRMSR (IA32_EFER). The
/// full-system plugin reads those registers again after a block that holds one.
pub fn may_change_mode(bytes: &[u8]) -> bool {
    [64, 32, 16].iter().any(|&bitness| {
        let insn = Decoder::new(bitness, bytes, DecoderOptions::NONE).decode();
        !insn.is_invalid()
            && match insn.mnemonic() {
                Mnemonic::Lmsw | Mnemonic::Rsm | Mnemonic::Wrmsr => true,
                Mnemonic::Mov => insn.op0_register() == iced_x86::Register::CR0,
                _ => false,
            }
    })
}

/// The memory operand of an instruction, with registers named as the plugin register API names
/// the full 64-bit registers ("rax", "r8", ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemOperand {
    pub base: Option<String>,
    pub index: Option<String>,
    pub scale: u32,
    /// Displacement; for RIP-relative operands already the absolute address.
    pub displacement: u64,
    /// "fs" or "gs" for an FS/GS segment override (the only non-zero bases in 64-bit mode).
    pub segment: Option<&'static str>,
    /// The segment the access uses (override or default: DS, or SS with a BP/SP base), named
    /// as the plugin register API names its selector.
    pub effective_segment: &'static str,
    /// Address size in bits (16-bit offsets wrap at 64 KiB).
    pub address_size: u32,
}

/// Decode the memory operand of the instruction at the start of `bytes` at `ip`.
pub fn memory_operand(bytes: &[u8], ip: u64, bitness: u32) -> Option<MemOperand> {
    use iced_x86::{OpKind, Register};
    let insn = Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE).decode();
    if insn.is_invalid() || !(0..insn.op_count()).any(|i| insn.op_kind(i) == OpKind::Memory) {
        return None;
    }
    let name = |r: Register| -> Option<String> {
        (r != Register::None).then(|| format!("{:?}", r.full_register()).to_lowercase())
    };
    let rip_relative = insn.is_ip_rel_memory_operand();
    Some(MemOperand {
        base: if rip_relative { None } else { name(insn.memory_base()) },
        index: name(insn.memory_index()),
        scale: insn.memory_index_scale(),
        displacement: if rip_relative { insn.ip_rel_memory_address() } else { insn.memory_displacement64() },
        segment: match insn.memory_segment() {
            Register::FS => Some("fs"),
            Register::GS => Some("gs"),
            _ => None,
        },
        effective_segment: match insn.memory_segment() {
            Register::ES => "es",
            Register::CS => "cs",
            Register::SS => "ss",
            Register::FS => "fs",
            Register::GS => "gs",
            _ => "ds",
        },
        address_size: match (insn.memory_base(), insn.memory_index()) {
            (Register::None, Register::None) => match insn.memory_displ_size() {
                2 => 16,
                4 => 32,
                _ => bitness,
            },
            (b, i) => {
                let r = if b != Register::None { b } else { i };
                if r.is_gpr16() {
                    16
                } else if r.is_gpr32() || r == Register::EIP {
                    32
                } else {
                    64
                }
            }
        },
    })
}

/// The linear address of memory operand `m` of an instruction decoded at `bitness`. `real_mode`:
/// CR0.PE = 0, where a segment's base is its selector << 4 (SDM Vol. 3A §20.1.1); `reg` reads a
/// register by the name the plugin register API uses ("rbx", "ds", "fs_base", ...). In protected
/// mode only the FS/GS bases are read (the others are taken as flat, SDM Vol. 3A §3.2.4).
pub fn operand_linear_address(m: &MemOperand, bitness: u32, real_mode: bool, reg: impl Fn(&str) -> u64) -> u64 {
    let r = |n: &Option<String>| n.as_deref().map_or(0, &reg);
    let mut offset = r(&m.base).wrapping_add(r(&m.index).wrapping_mul(u64::from(m.scale))).wrapping_add(m.displacement);
    offset &= match m.address_size {
        16 => 0xFFFF,
        32 => 0xFFFF_FFFF,
        _ => u64::MAX,
    };
    if real_mode {
        return ((reg(m.effective_segment) & 0xFFFF) << 4).wrapping_add(offset) & 0x1F_FFFF;
    }
    let base = match m.effective_segment {
        "fs" => reg("fs_base"),
        "gs" => reg("gs_base"),
        _ => 0,
    };
    let linear = base.wrapping_add(offset);
    if bitness == 64 {
        linear
    } else {
        linear & 0xFFFF_FFFF
    }
}

/// How many bytes of base address LGDT / LIDT load from their m16&32 / m16&64 operand (after
/// the 2-byte limit): 8 in 64-bit mode; otherwise 4, or 3 (a 24-bit base) with a 16-bit
/// operand size (SDM Vol. 2A LGDT/LIDT: "If the operand-size attribute is 16 bits, a 16-bit
/// limit and a 24-bit base address are loaded").
pub fn pseudo_descriptor_base_len(bytes: &[u8], bitness: u32) -> Option<usize> {
    let insn = Decoder::new(bitness, bytes, DecoderOptions::NONE).decode();
    match insn.code() {
        Code::Lgdt_m1632_16 | Code::Lidt_m1632_16 => Some(3),
        Code::Lgdt_m1632 | Code::Lidt_m1632 => Some(4),
        Code::Lgdt_m1664 | Code::Lidt_m1664 => Some(8),
        _ => None,
    }
}

/// Whether the instruction at the start of `bytes` takes its branch target from memory with its
/// one load: a near RET (C3H, C2H iw: pops the return address) or a near indirect JMP / CALL
/// with a memory operand (FF /4, FF /2; a CALL also pushes, a store). The value that load
/// returns, zero-extended from the operand size, is the next RIP (SDM Vol. 2A "CALL", "JMP",
/// Vol. 2B "RET"), so it can stand for reading RIP after the instruction.
pub fn loads_branch_target(bytes: &[u8], bitness: u32) -> bool {
    let insn = Decoder::with_ip(bitness, bytes, 0, DecoderOptions::NONE).decode();
    if insn.is_invalid() {
        return false;
    }
    match insn.flow_control() {
        FlowControl::Return => insn.mnemonic() == Mnemonic::Ret,
        FlowControl::IndirectBranch | FlowControl::IndirectCall => {
            (insn.is_jmp_near_indirect() || insn.is_call_near_indirect()) && insn.op0_kind() == OpKind::Memory
        }
        _ => false,
    }
}

/// Classify the instruction at `ip` whose bytes start `bytes` (64-bit mode unless `bitness` says
/// otherwise). Returns None if the bytes do not decode to a valid instruction.
pub fn classify(bytes: &[u8], ip: u64, bitness: u32) -> Option<ClassifiedInsn> {
    let mut dec = Decoder::with_ip(bitness, bytes, ip, DecoderOptions::NONE);
    let insn = dec.decode();
    if insn.is_invalid() {
        return None;
    }
    let rep_string = (insn.has_rep_prefix() || insn.has_repne_prefix()) && insn.is_string_instruction();
    let mut kind = kind_of(&insn);
    if insn.op0_kind() == OpKind::NearBranch16 {
        // A near branch with a 16-bit operand size: "EIP <- tempEIP AND 0000FFFFH" (SDM JMP,
        // CALL, Jcc) wraps the offset in CS, while `ip` is linear (CS base + IP, the base not
        // known here). The displacement is kept instead: exact unless the offset wraps at 64 KiB
        // (issue 12: 16-bit code above linear 10000H, e.g. a segment based at 100000H).
        let next = ip.wrapping_add(insn.len() as u64);
        let fix = |t: u64| next.wrapping_add(t.wrapping_sub(next) as u16 as i16 as i64 as u64);
        kind = match kind {
            BranchKind::Conditional { target } => BranchKind::Conditional { target: fix(target) },
            BranchKind::DirectJump { target } => BranchKind::DirectJump { target: fix(target) },
            BranchKind::DirectCall { target } => BranchKind::DirectCall { target: fix(target) },
            k => k,
        };
    }
    Some(ClassifiedInsn { ip, len: insn.len() as u8, kind, rep_string })
}

/// The COFI class of `bytes` decoded as `bitness`-bit code (None: not one whole valid
/// instruction).
pub fn kind_of_bytes(bytes: &[u8], bitness: u32) -> Option<BranchKind> {
    let insn = Decoder::new(bitness, bytes, DecoderOptions::NONE).decode();
    (!insn.is_invalid() && insn.len() == bytes.len()).then(|| kind_of(&insn))
}

fn kind_of(insn: &Instruction) -> BranchKind {
    match insn.mnemonic() {
        Mnemonic::Syscall => return BranchKind::Far(FarKind::Syscall),
        Mnemonic::Sysret | Mnemonic::Sysretq => return BranchKind::Far(FarKind::Sysret),
        Mnemonic::Sysenter => return BranchKind::Far(FarKind::Sysenter),
        Mnemonic::Sysexit | Mnemonic::Sysexitq => return BranchKind::Far(FarKind::Sysexit),
        Mnemonic::Iret | Mnemonic::Iretd | Mnemonic::Iretq => return BranchKind::Far(FarKind::Iret),
        Mnemonic::Retf => return BranchKind::Far(FarKind::FarRet),
        Mnemonic::Int | Mnemonic::Int3 | Mnemonic::Into | Mnemonic::Int1 => {
            return BranchKind::SoftwareInterrupt
        }
        Mnemonic::Ud2 | Mnemonic::Ud0 | Mnemonic::Ud1 => return BranchKind::AlwaysFaults,
        _ => {}
    }
    if insn.is_jmp_far() || insn.is_jmp_far_indirect() {
        return BranchKind::Far(FarKind::FarJmp);
    }
    if insn.is_call_far() || insn.is_call_far_indirect() {
        return BranchKind::Far(FarKind::FarCall);
    }
    match insn.flow_control() {
        FlowControl::Next | FlowControl::XbeginXabortXend => BranchKind::None,
        FlowControl::ConditionalBranch => BranchKind::Conditional { target: insn.near_branch_target() },
        FlowControl::UnconditionalBranch => BranchKind::DirectJump { target: insn.near_branch_target() },
        FlowControl::Call => BranchKind::DirectCall { target: insn.near_branch_target() },
        FlowControl::IndirectBranch => BranchKind::IndirectJump,
        FlowControl::IndirectCall => BranchKind::IndirectCall,
        FlowControl::Return => BranchKind::Return,
        FlowControl::Interrupt => BranchKind::SoftwareInterrupt,
        FlowControl::Exception => {
            // Code::Ud2 etc. handled above; anything else iced calls an exception (e.g. BOUND in
            // 32-bit code) may continue normally.
            if insn.code() == Code::INVALID {
                BranchKind::AlwaysFaults
            } else {
                BranchKind::None
            }
        }
    }
}

/// The execution modes (16-, 32-, 64-bit code) a translated block is consistent with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ModeSet(pub u8);

impl ModeSet {
    pub const ALL: ModeSet = ModeSet(7);
    fn bit(mode: ExecMode) -> u8 {
        match mode {
            ExecMode::Bit16 => 1,
            ExecMode::Bit32 => 2,
            ExecMode::Bit64 => 4,
        }
    }
    pub fn contains(self, mode: ExecMode) -> bool {
        self.0 & Self::bit(mode) != 0
    }
    pub fn with(self, mode: ExecMode) -> ModeSet {
        ModeSet(self.0 | Self::bit(mode))
    }
    /// The only mode in the set, if exactly one.
    pub fn single(self) -> Option<ExecMode> {
        match self.0 {
            1 => Some(ExecMode::Bit16),
            2 => Some(ExecMode::Bit32),
            4 => Some(ExecMode::Bit64),
            _ => None,
        }
    }
}

/// The modes in which the block's bytes decode into exactly QEMU's instruction boundaries
/// (`insns`: each instruction's bytes as QEMU translated them). The operand- and address-size
/// defaults follow CS.D and CS.L (SDM Vol. 1 §3.6, Vol. 3A §3.4.5), so the lengths QEMU
/// decoded tell which modes it translated in.
pub fn consistent_modes<'a>(insns: impl IntoIterator<Item = &'a [u8]> + Clone) -> ModeSet {
    let mut set = ModeSet::default();
    for (mode, bitness) in [(ExecMode::Bit16, 16), (ExecMode::Bit32, 32), (ExecMode::Bit64, 64)] {
        let ok = insns.clone().into_iter().all(|bytes| {
            let insn = Decoder::new(bitness, bytes, DecoderOptions::NONE).decode();
            !insn.is_invalid() && insn.len() == bytes.len()
        });
        if ok {
            set = set.with(mode);
        }
    }
    set
}

/// The mode a block runs in. `descriptor`: the mode the CS descriptor in the remembered GDT
/// says; `consistent`: the modes the block's translation is consistent with; `lma`/`pe`:
/// IA32_EFER.LMA and CR0.PE; `proven`: the mode of the code segment register's descriptor cache
/// as last established (an unambiguous block, or the descriptor read when CS was loaded) while
/// CS and CR0.PE are unchanged and no far transfer or event reloaded CS. `descriptor` is None when
/// the GDT is unknown or unreadable.
/// SDM Vol. 3A §2.2, §9.8.5: 64-bit mode needs EFER.LMA = 1 (and CS.L); real mode is 16-bit.
/// SDM Vol. 3A §3.4.3: the processor uses the hidden part of CS loaded with the selector; a GDT
/// entry rewritten in memory changes nothing until CS is reloaded, so a proven mode comes before
/// the descriptor now in memory (issue 12).
pub fn choose_mode(descriptor: Option<ExecMode>, consistent: ModeSet, lma: bool, pe: bool, proven: Option<ExecMode>) -> ExecMode {
    let mut possible = consistent;
    if !lma {
        possible = ModeSet(possible.0 & !4);
    }
    if !pe {
        // Real mode: CS.D is what the descriptor cache holds (a real-mode load of CS changes its
        // selector and base only; clearing CR0.PE keeps a 32-bit CS 32-bit, SDM Vol. 3A §9.9.2),
        // so the caller gives the cached mode as `descriptor`; the block's boundaries come first,
        // as in protected mode: QEMU then translates 32-bit code with CR0.PE = 0 (issue 12).
        if let Some(m) = possible.single() {
            return m;
        }
        let cached = if descriptor == Some(ExecMode::Bit32) { ExecMode::Bit32 } else { ExecMode::Bit16 };
        return if possible.contains(cached) || possible.0 == 0 { cached } else { ExecMode::Bit16 };
    }
    if let Some(m) = possible.single() {
        return m;
    }
    if let Some(p) = proven.filter(|&p| possible.contains(p)) {
        return p;
    }
    if let Some(d) = descriptor.filter(|&d| possible.contains(d)) {
        return d;
    }
    // Nothing decides: the descriptor; without one (GDT unknown or unreadable), 64-bit code
    // with LMA = 1, else 32-bit (flat segments), when consistent.
    let guess = descriptor.unwrap_or(if lma { ExecMode::Bit64 } else { ExecMode::Bit32 });
    if possible.contains(guess) || possible.0 == 0 {
        return guess;
    }
    [ExecMode::Bit32, ExecMode::Bit16, ExecMode::Bit64].into_iter().find(|&m| possible.contains(m)).unwrap_or(guess)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_ret_and_memory_indirect_jumps_load_their_target_register_forms_and_far_do_not() {
        for bits in [16, 32, 64] {
            assert!(loads_branch_target(&[0xC3], bits), "ret {bits}");
            assert!(loads_branch_target(&[0xC2, 0x08, 0x00], bits), "ret 8 {bits}");
            assert!(loads_branch_target(&[0xFF, 0x20], bits), "jmp [rax] {bits}");
            assert!(loads_branch_target(&[0xFF, 0x10], bits), "call [rax] {bits}");
            assert!(!loads_branch_target(&[0xFF, 0xE0], bits), "jmp rax {bits}");
            assert!(!loads_branch_target(&[0xFF, 0xD0], bits), "call rax {bits}");
            assert!(!loads_branch_target(&[0xCB], bits), "retf {bits}");
            assert!(!loads_branch_target(&[0xFF, 0x28], bits), "jmp far [rax] {bits}");
            assert!(!loads_branch_target(&[0xFF, 0x18], bits), "call far [rax] {bits}");
            assert!(!loads_branch_target(&[0xCF], bits), "iret {bits}");
            assert!(!loads_branch_target(&[0xE9, 0, 0, 0, 0], bits), "jmp rel {bits}");
            assert!(!loads_branch_target(&[0x8B, 0x00], bits), "mov eax, [rax] {bits}");
        }
        // jmp [rip + 0x100] (a PLT entry) and jmp qword [r8] in 64-bit code; in 32-bit code
        // 41H is INC ECX, not a prefix.
        assert!(loads_branch_target(&[0xFF, 0x25, 0x00, 0x01, 0x00, 0x00], 64));
        assert!(loads_branch_target(&[0x41, 0xFF, 0x20], 64));
        assert!(!loads_branch_target(&[0x41, 0xFF, 0x20], 32));
    }

    fn k(bytes: &[u8]) -> BranchKind {
        classify(bytes, 0x401000, 64).unwrap().kind
    }

    #[test]
    fn mode_changing_instructions_are_found_in_every_mode() {
        assert!(may_change_mode(&[0x0F, 0x22, 0xC0])); // mov cr0, eax / rax
        assert!(may_change_mode(&[0x0F, 0x01, 0xF0])); // lmsw ax
        assert!(may_change_mode(&[0x0F, 0xAA])); // rsm
        assert!(may_change_mode(&[0x0F, 0x30])); // wrmsr (IA32_EFER)
        assert!(!may_change_mode(&[0x0F, 0x22, 0xD8]), "mov cr3 changes no mode");
        assert!(!may_change_mode(&[0x0F, 0x22, 0xE0]), "mov cr4 changes no mode");
        assert!(!may_change_mode(&[0x0F, 0x20, 0xC0]), "mov from cr0");
        assert!(!may_change_mode(&[0x75, 0x10]));
    }

    #[test]
    fn near_branches_are_classified_with_their_targets() {
        assert_eq!(k(&[0x75, 0x10]), BranchKind::Conditional { target: 0x401012 }); // jne +0x10
        assert_eq!(k(&[0xE3, 0xFE]), BranchKind::Conditional { target: 0x401000 }); // jrcxz self
        assert_eq!(k(&[0xE2, 0xFE]), BranchKind::Conditional { target: 0x401000 }); // loop self
        assert_eq!(k(&[0xEB, 0x00]), BranchKind::DirectJump { target: 0x401002 });
        assert_eq!(k(&[0xE8, 0, 0, 0, 0]), BranchKind::DirectCall { target: 0x401005 });
        assert_eq!(k(&[0xFF, 0xE0]), BranchKind::IndirectJump); // jmp rax
        assert_eq!(k(&[0xFF, 0x24, 0xC5, 0, 0x20, 0x40, 0]), BranchKind::IndirectJump); // jmp [rax*8+0x402000]
        assert_eq!(k(&[0xFF, 0xD0]), BranchKind::IndirectCall); // call rax
        assert_eq!(k(&[0xC3]), BranchKind::Return);
        assert_eq!(k(&[0xC2, 0x08, 0x00]), BranchKind::Return); // ret 8
    }

    #[test]
    fn far_transfers_and_interrupts_are_not_near_branches() {
        assert_eq!(k(&[0x0F, 0x05]), BranchKind::Far(FarKind::Syscall));
        assert_eq!(k(&[0x48, 0x0F, 0x07]), BranchKind::Far(FarKind::Sysret));
        assert_eq!(k(&[0x48, 0xCF]), BranchKind::Far(FarKind::Iret));
        assert_eq!(k(&[0xCB]), BranchKind::Far(FarKind::FarRet));
        assert_eq!(k(&[0xFF, 0x18]), BranchKind::Far(FarKind::FarCall)); // call far [rax]
        assert_eq!(k(&[0xCD, 0x80]), BranchKind::SoftwareInterrupt);
        assert_eq!(k(&[0xCC]), BranchKind::SoftwareInterrupt);
        assert_eq!(k(&[0x0F, 0x0B]), BranchKind::AlwaysFaults);
    }

    #[test]
    fn ordinary_instructions_are_not_cofi() {
        assert_eq!(k(&[0x48, 0x89, 0xD8]), BranchKind::None); // mov rax, rbx
        assert_eq!(k(&[0x48, 0x0F, 0x44, 0xC3]), BranchKind::None); // cmove rax, rbx
        assert_eq!(classify(&[0x0F, 0xA2], 0, 64).unwrap().len, 2); // cpuid
        assert!(classify(&[0x0F], 0, 64).is_none());
        assert!(classify(&[0xF3, 0xA4], 0, 64).unwrap().rep_string); // rep movsb
        let jcc = classify(&[0x75, 0x10], 0x401000, 64).unwrap().relocated(0x1000);
        assert_eq!((jcc.ip, jcc.kind), (0x402000, BranchKind::Conditional { target: 0x402012 }));
        assert_eq!(system_op(&[0x0F, 0xA2], 64), Some(SystemOp::Cpuid));
        assert_eq!(system_op(&[0x0F, 0x30], 64), Some(SystemOp::Wrmsr));
        assert_eq!(system_op(&[0x0F, 0x33], 64), Some(SystemOp::Rdpmc));
        assert_eq!(system_op(&[0x0F, 0x32], 64), Some(SystemOp::Rdmsr));
        assert_eq!(system_op(&[0xF4], 64), Some(SystemOp::Hlt));
        assert_eq!(system_op(&[0x0F, 0x22, 0xD8], 64), Some(SystemOp::MovToCr3)); // mov cr3, rax
        assert_eq!(system_op(&[0x0F, 0x20, 0xD8], 64), None); // mov rax, cr3
        assert_eq!(system_op(&[0x0F, 0x01, 0x10], 64), Some(SystemOp::Lgdt)); // lgdt [rax]
        assert_eq!(system_op(&[0x0F, 0x01, 0x18], 64), Some(SystemOp::Lidt)); // lidt [rax]
        let m = memory_operand(&[0x0F, 0x01, 0x54, 0x8B, 0x10], 0, 64).unwrap(); // lgdt [rbx+rcx*4+0x10]
        assert_eq!((m.base.as_deref(), m.index.as_deref(), m.scale, m.displacement), (Some("rbx"), Some("rcx"), 4, 0x10));
        let r = memory_operand(&[0x0F, 0x01, 0x15, 0x10, 0, 0, 0], 0x1000, 64).unwrap(); // lgdt [rip+0x10]
        assert_eq!((r.base, r.displacement), (None, 0x1017));
        assert!(memory_operand(&[0x90], 0, 64).is_none());
        assert!(!classify(&[0xA4], 0, 64).unwrap().rep_string); // movsb
    }

    #[test]
    fn consistent_modes_from_boundaries() {
        // call rel32 (E8 + 4 bytes) is 5 bytes in 32/64-bit code, 3 (rel16) in 16-bit code.
        let call: &[u8] = &[0xE8, 0x10, 0x00, 0x00, 0x00];
        assert_eq!(consistent_modes([call]), ModeSet(2 | 4));
        assert_eq!(consistent_modes([&call[..3]]), ModeSet(1));
        // mov eax, imm32 then dec eax (0x48 is a REX prefix in 64-bit mode).
        let mov: &[u8] = &[0xB8, 1, 0, 0, 0];
        let dec: &[u8] = &[0x48];
        assert_eq!(consistent_modes([mov, dec]), ModeSet(2));
        assert_eq!(consistent_modes([&[0x90u8][..]]), ModeSet::ALL);
    }

    #[test]
    fn choose_mode_rules() {
        use ExecMode::*;
        let m = |bits| ModeSet(bits);
        // The reported case: descriptor says 16-bit, block only consistent with 32/64, LMA=0.
        assert_eq!(choose_mode(Some(Bit16), m(6), false, true, None), Bit32);
        // Live mode consistent: kept.
        assert_eq!(choose_mode(Some(Bit64), m(6), true, true, None), Bit64);
        // Real mode: 16-bit code unless the cached CS is a 32-bit one.
        assert_eq!(choose_mode(Some(Bit16), m(7), false, false, None), Bit16);
        // Ambiguous: proven mode wins over the inconsistent descriptor.
        assert_eq!(choose_mode(Some(Bit64), m(3), false, true, Some(Bit16)), Bit16);
        assert_eq!(choose_mode(Some(Bit64), m(3), false, true, None), Bit32);
        // All consistent, nothing proven: the descriptor.
        assert_eq!(choose_mode(Some(Bit16), m(7), false, true, None), Bit16);
        // A proven mode (the descriptor cache) comes before the descriptor in memory.
        assert_eq!(choose_mode(Some(Bit32), m(3), false, true, Some(Bit16)), Bit16);
        // GDT unreadable right after MOV CR0 set LMA (compatibility mode until the far JMP):
        // the mode proven before decides, else 64-bit with LMA.
        assert_eq!(choose_mode(None, m(6), true, true, Some(Bit32)), Bit32);
        assert_eq!(choose_mode(None, m(6), true, true, None), Bit64);
        assert_eq!(choose_mode(None, m(7), false, true, None), Bit32);
    }

    #[test]
    fn sixteen_bit_branch_targets_in_a_segment_based_above_64_kib() {
        // `call f16` (E8 rel16) and `jmp short` at linear 100128H in a 16-bit segment with base
        // 100128H: the targets are linear too (the offset, not the linear address, wraps).
        let call = classify(&[0xE8, 0x07, 0x00], 0x10_0128, 16).unwrap();
        assert_eq!(call.kind, BranchKind::DirectCall { target: 0x10_0132 });
        let back = classify(&[0xEB, 0xFC], 0x10_0128, 16).unwrap();
        assert_eq!(back.kind, BranchKind::DirectJump { target: 0x10_0126 });
        let jcc = classify(&[0x75, 0x10], 0x2_FFF0, 16).unwrap();
        assert_eq!(jcc.kind, BranchKind::Conditional { target: 0x3_0002 });
        // 32-bit operand size in 16-bit code (66 E9 rel32): not wrapped at 64 KiB.
        let jmp32 = classify(&[0x66, 0xE9, 0x00, 0x10, 0x00, 0x00], 0x10_0000, 16).unwrap();
        assert_eq!(jmp32.kind, BranchKind::DirectJump { target: 0x10_1006 });
    }

    #[test]
    fn real_mode_with_a_32bit_cs_still_cached_runs_32bit_code() {
        use ExecMode::*;
        // MOV CR0 clearing PE in a 32-bit code segment: QEMU keeps translating 32-bit code
        // (CS.D cached) until a load of CS makes it 16-bit; the boundaries say which.
        let call32: &[u8] = &[0xE8, 0x10, 0x00, 0x00, 0x00];
        let call16: &[u8] = &[0xE8, 0x10, 0x00];
        let wrmsr: &[u8] = &[0x0F, 0x30];
        assert_eq!(choose_mode(Some(Bit16), consistent_modes([call32]), false, false, None), Bit32);
        assert_eq!(choose_mode(Some(Bit32), consistent_modes([call16]), false, false, None), Bit16);
        // A block that decodes alike in both: the cached CS.D.
        assert_eq!(choose_mode(Some(Bit32), consistent_modes([wrmsr]), false, false, None), Bit32);
        assert_eq!(choose_mode(Some(Bit16), consistent_modes([wrmsr]), false, false, None), Bit16);
        // Never 64-bit code in real mode.
        assert_eq!(choose_mode(Some(Bit64), ModeSet(4), false, false, None), Bit16);
    }

    #[test]
    fn gdt_entry_rewritten_without_reloading_cs_keeps_the_cached_mode() {
        use ExecMode::*;
        // 16-bit code (CS.D = 0) proved by `call rel16`; software sets D = 1 in the GDT entry
        // without reloading CS, then enables tracing in a block that decodes alike as 16- and
        // 32-bit code (WRMSR): the descriptor in memory says 32-bit, the cache still 16-bit.
        let wrmsr: &[u8] = &[0x0F, 0x30];
        let ambiguous = consistent_modes([wrmsr]);
        assert_eq!(choose_mode(Some(Bit32), ambiguous, false, true, Some(Bit16)), Bit16);
        // In IA-32e mode: a compatibility-mode segment rewritten to L = 1.
        let mov: &[u8] = &[0x89, 0xC8]; // mov eax, ecx
        assert_eq!(choose_mode(Some(Bit64), consistent_modes([mov]), true, true, Some(Bit32)), Bit32);
        // After the far transfer that reloads CS the cache is gone (the caller drops `proven`):
        // the descriptor decides.
        assert_eq!(choose_mode(Some(Bit32), ambiguous, false, true, None), Bit32);
        // The block itself is ground truth whatever is cached.
        let call16: &[u8] = &[0xE8, 0x10, 0x00];
        assert_eq!(choose_mode(Some(Bit32), consistent_modes([call16]), false, true, Some(Bit32)), Bit16);
    }

    #[test]
    fn real_mode_lgdt_operand() {
        // QEMU's multiboot option ROM: `data32 lgdt %gs:0x...` (66 65 0F 01 16 disp16).
        let bytes = [0x66, 0x65, 0x0F, 0x01, 0x16, 0x34, 0x12];
        let m = memory_operand(&bytes, 0, 16).unwrap();
        assert_eq!((m.effective_segment, m.address_size, m.displacement), ("gs", 16, 0x1234));
        let reg = |n: &str| match n {
            "gs" => 0x9000,
            "ds" => 0x1000,
            "gs_base" => 0x5555,
            _ => 0,
        };
        assert_eq!(operand_linear_address(&m, 16, true, reg), 0x91234);
        assert_eq!(pseudo_descriptor_base_len(&bytes, 16), Some(4));
        // Without the override: DS; without data32: a 24-bit base.
        let plain = [0x0F, 0x01, 0x16, 0x34, 0x12];
        let m = memory_operand(&plain, 0, 16).unwrap();
        assert_eq!(operand_linear_address(&m, 16, true, reg), 0x11234);
        assert_eq!(pseudo_descriptor_base_len(&plain, 16), Some(3));
        // 32-bit protected mode: lgdt [ebx+8] flat; a 66h prefix gives a 24-bit base.
        let m = memory_operand(&[0x0F, 0x01, 0x53, 0x08], 0, 32).unwrap();
        assert_eq!(operand_linear_address(&m, 32, false, |n| if n == "rbx" { 0x1_0000_2000 } else { 0 }), 0x2008);
        assert_eq!(pseudo_descriptor_base_len(&[0x66, 0x0F, 0x01, 0x53, 0x08], 32), Some(3));
        assert_eq!(pseudo_descriptor_base_len(&[0x0F, 0x01, 0x10], 64), Some(8));
    }
}
