/* retmismatch: no libc. Returns that do not match their calls and other unusual
 * control transfers: push+ret as jump, call-0/pop get-PC, frame-skipping return,
 * ret $imm16, return-address rewriting, indirect jmp/call via register and memory,
 * `loop`, cmov, raw syscalls. Exits 0 via syscall 60 if every check passes. */
        .text
        .globl  _start
_start:
        xor     %r15d, %r15d            /* r15: running checksum */

        /* 1. push + ret used as a jump (ret with no matching call) */
        lea     1f(%rip), %rax
        push    %rax
        ret
        jmp     fail
1:
        /* 2. get-PC idiom: call with displacement 0, then pop */
        call    2f
2:      pop     %rbx
        lea     2b(%rip), %rcx
        cmp     %rbx, %rcx
        jne     fail

        /* 3. a return that skips a frame: inner drops outer's return address */
        mov     %rsp, %r12
        call    skip_outer
        cmp     %rsp, %r12
        jne     fail
        add     $1, %r15

        /* 4. ret $imm16 (callee pops its stack arguments) */
        mov     %rsp, %r12
        pushq   $40
        pushq   $2
        call    stdcall_add
        cmp     %rsp, %r12
        jne     fail
        cmp     $42, %rax
        jne     fail

        /* 5. callee rewrites its return address to skip inline data after the call */
        call    skip_inline
        .ascii  "inline data the callee skips\0"
        add     $1, %r15

        /* 6. indirect jmp via register and via memory */
        lea     3f(%rip), %rax
        jmp     *%rax
        jmp     fail
3:      jmp     *jmp_slot(%rip)
        jmp     fail
jmp_target:
        add     $1, %r15

        /* 7. call *%rax and call *mem, in a loop with varying targets */
        mov     $12, %r13d
4:      mov     %r13d, %eax
        and     $3, %eax
        mov     fn_table(,%rax,8), %rax
        mov     %r13, %rdi
        call    *%rax
        add     %rax, %r15
        mov     %r13d, %eax
        and     $1, %eax
        call    *fn_table(,%rax,8)
        add     %rax, %r15
        dec     %r13d
        jnz     4b

        /* 8. a loop with the `loop` instruction */
        mov     $100, %ecx
        xor     %edx, %edx
5:      add     %rcx, %rdx
        loop    5b
        cmp     $5050, %rdx
        jne     fail

        /* 9. conditional moves, not branches: running max/min of an LCG */
        mov     $12345, %eax
        xor     %r8d, %r8d              /* max */
        mov     $-1, %r9                /* min (unsigned) */
        mov     $200, %ecx
6:      imul    $1103515245, %eax, %eax
        add     $12345, %eax
        mov     %eax, %edx
        shr     $16, %edx
        cmp     %r8, %rdx
        cmova   %rdx, %r8
        cmp     %r9, %rdx
        cmovb   %rdx, %r9
        dec     %ecx
        jnz     6b
        cmp     %r9, %r8
        jb      fail

        /* 10. a ret into the middle of a different caller: swap return addresses */
        call    ret_elsewhere
        jmp     fail                    /* skipped: ret_elsewhere returns to 7f */
7:      add     $1, %r15

        /* checksum must match the value computed by hand:
           4 adds of 1 + sum over r13=12..1 of (f[r13&3](r13) + f[r13&1]()) */
        cmp     $expected_sum, %r15
        jne     fail

        /* write "retmismatch: ok\n" and exit 0 */
        mov     $1, %eax
        mov     $1, %edi
        lea     msg_ok(%rip), %rsi
        mov     $msg_ok_len, %edx
        syscall
        mov     $60, %eax
        xor     %edi, %edi
        syscall

fail:
        mov     $1, %eax
        mov     $2, %edi
        lea     msg_fail(%rip), %rsi
        mov     $msg_fail_len, %edx
        syscall
        mov     $60, %eax
        mov     $1, %edi
        syscall

/* ---- helpers ---- */
skip_outer:
        call    skip_inner
        jmp     fail                    /* never returned to */
skip_inner:
        add     $8, %rsp                /* drop skip_outer's return address */
        ret                             /* returns straight to _start */

stdcall_add:
        mov     8(%rsp), %rax
        add     16(%rsp), %rax
        ret     $16

skip_inline:
        pop     %rsi                    /* address of the inline string */
        mov     %rsi, %rdi
8:      cmpb    $0, (%rdi)
        lea     1(%rdi), %rdi
        jne     8b
        push    %rdi                    /* new return address: past the NUL */
        ret

ret_elsewhere:
        lea     7b(%rip), %rax
        mov     %rax, (%rsp)
        ret

/* f0(x)=x+1  f1(x)=2  f2(x)=3x  f3(x)=5   (f0/f1 also called with garbage x: see below) */
f0:     lea     1(%rdi), %rax
        ret
f1:     mov     $2, %eax
        ret
f2:     lea     (%rdi,%rdi,2), %rax
        ret
f3:     mov     $5, %eax
        ret

        .section .rodata
        .align  8
fn_table:
        .quad   f0, f1, f2, f3
jmp_slot:
        .quad   jmp_target
msg_ok:
        .ascii  "retmismatch: ok\n"
        .set    msg_ok_len, . - msg_ok
msg_fail:
        .ascii  "retmismatch: FAIL\n"
        .set    msg_fail_len, . - msg_fail

/* expected checksum. Loop r = 12..1: call *%rax gives f[r&3](r); call *mem gives
   f[r&1](r) (rdi still = r).
   r=12: f0(12)=13 + f0(12)=13 -> 26      r=11: f3=5 + f1=2 -> 7
   r=10: f2(10)=30 + f0(10)=11 -> 41      r=9:  f1=2 + f1=2 -> 4
   r=8:  f0(8)=9 + f0(8)=9 -> 18          r=7:  f3=5 + f1=2 -> 7
   r=6:  f2(6)=18 + f0(6)=7 -> 25         r=5:  f1=2 + f1=2 -> 4
   r=4:  f0(4)=5 + f0(4)=5 -> 10          r=3:  f3=5 + f1=2 -> 7
   r=2:  f2(2)=6 + f0(2)=3 -> 9           r=1:  f1=2 + f1=2 -> 4
   total 162, plus 4 increments = 166 */
        .set    expected_sum, 166
        .section .note.GNU-stack,"",@progbits
