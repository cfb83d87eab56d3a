/* Interrupt stubs, SYSCALL entry and the ring 0 <-> ring 3 switch. */
#include "layout.h"

    .text
    .code64

/* Saves the general registers below the (vector, error code, hardware frame) to form a struct
 * trap_frame (guest.h), calls \fn(frame), restores them (possibly modified by \fn). */
.macro SAVE_REGS
    push %rax; push %rbx; push %rcx; push %rdx; push %rsi; push %rdi; push %rbp
    push %r8; push %r9; push %r10; push %r11; push %r12; push %r13; push %r14; push %r15
.endm
.macro RESTORE_REGS
    pop %r15; pop %r14; pop %r13; pop %r12; pop %r11; pop %r10; pop %r9; pop %r8
    pop %rbp; pop %rdi; pop %rsi; pop %rdx; pop %rcx; pop %rbx; pop %rax
.endm

/* One 16-byte stub per vector. Exceptions with an error code (SDM Vol. 3A §6.15: 8, 10-14, 17,
 * 21, 29, 30) have it pushed by the CPU; the others push a 0 so that every frame looks alike.
 * In 64-bit mode the CPU aligns RSP to 16 and always pushes SS:RSP (§6.14.2), so the
 * 22-quadword frame leaves RSP 16-byte aligned at the call. */
    .balign 16
    .globl isr_stubs
isr_stubs:
    .set vec, 0
    .rept 256
    .balign 16
    .if (vec == 8) || ((vec >= 10) && (vec <= 14)) || (vec == 17) || (vec == 21) || (vec == 29) || (vec == 30)
    .else
    pushq $0
    .endif
    pushq $vec
    jmp trap_common
    .set vec, vec + 1
    .endr

trap_common:
    SAVE_REGS
    mov %rsp, %rdi
    call trap_dispatch
    RESTORE_REGS
    add $16, %rsp       /* vector, error code */
    .globl trap_iret
trap_iret:
    iretq

/* SYSCALL (SDM Vol. 3A §5.8.8; Vol. 2B SYSCALL): RCX = user RIP, R11 = user RFLAGS, RSP still
 * the user stack, RFLAGS masked by IA32_FMASK (IF cleared). Builds the same trap_frame on the
 * RSP0 stack (vector SYSCALL_FRAME), calls syscall_dispatch() and returns with SYSRET. */
    .globl syscall_entry
syscall_entry:
    mov %rsp, syscall_user_rsp(%rip)
    lea rsp0_stack_top(%rip), %rsp
    pushq $USER_DS
    pushq syscall_user_rsp(%rip)
    push %r11
    pushq $USER_CS
    push %rcx
    pushq $0
    pushq $SYSCALL_FRAME
    SAVE_REGS
    mov %rsp, %rdi
    call syscall_dispatch
    RESTORE_REGS
    add $16, %rsp
    mov 0(%rsp), %rcx   /* RIP */
    mov 16(%rsp), %r11  /* RFLAGS */
    mov 24(%rsp), %rsp  /* RSP */
    sysretq

/* uint64_t enter_user_asm(uint64_t rip, uint64_t rsp, uint64_t ret_tramp): saves the kernel
 * context, pushes ret_tramp as fn's return address on the user stack and IRETs to ring 3
 * (SDM Vol. 3A §6.14.3, IRET to a less privileged level) with IF = 1. */
    .globl enter_user_asm
enter_user_asm:
    push %rbx; push %rbp; push %r12; push %r13; push %r14; push %r15
    pushfq
    mov %rsp, user_return_rsp(%rip)
    and $-16, %rsi
    sub $8, %rsi
    mov %rdx, (%rsi)
    pushq $USER_DS
    push %rsi
    pushq $0x202
    pushq $USER_CS
    push %rdi
    iretq

/* _Noreturn void user_return(uint64_t value): called in ring 0 by SYS_EXIT; enter_user_asm()
 * returns value. */
    .globl user_return
user_return:
    mov %rdi, %rax
    mov user_return_rsp(%rip), %rsp
    mov $KERNEL_DS, %ecx
    mov %ecx, %ss
    mov %ecx, %ds
    mov %ecx, %es
    popfq
    pop %r15; pop %r14; pop %r13; pop %r12; pop %rbp; pop %rbx
    ret

/* Return addresses of a ring-3 function (run from the user alias): exit with its result. */
    .globl user_exit_syscall, user_exit_int80
user_exit_syscall:
    mov %rax, %rdi
    mov $SYS_EXIT, %eax
    syscall
    ud2
user_exit_int80:
    mov %rax, %rdi
    mov $SYS_EXIT, %eax
    int $SYSCALL_VECTOR
    ud2

    .data
    .balign 8
syscall_user_rsp: .quad 0
user_return_rsp:  .quad 0
