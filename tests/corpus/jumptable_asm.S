/* jumptable_asm: no libc. A computed jump table `jmp *table(,%rax,8)` over 16 cases,
 * nested calls 70 (and 150) deep then returns (past a 64-entry return stack),
 * returns via `jmp *` instead of `ret`, a stack-unwinding escape from depth 100,
 * and jrcxz. Exits 0 via syscall 60 if every check passes. */
        .text
        .globl  _start
_start:
        /* ---- 1. jump table dispatch driven by an LCG ---- */
        mov     $2024, %r12d            /* LCG state */
        xor     %r13d, %r13d            /* accumulator */
        mov     $3000, %r14d            /* iterations */
1:      imul    $1103515245, %r12d, %r12d
        add     $12345, %r12d
        mov     %r12d, %eax
        shr     $16, %eax
        and     $15, %eax
        jmp     *jt(,%rax,8)
c0:     add     $1, %r13
        jmp     2f
c1:     sub     $3, %r13
        jmp     2f
c2:     xor     $0x55, %r13
        jmp     2f
c3:     shl     $1, %r13
        and     $0xffffff, %r13
        jmp     2f
c4:     shr     $2, %r13
        jmp     2f
c5:     lea     (%r13,%r13,4), %r13
        and     $0xffffff, %r13
        jmp     2f
c6:     not     %r13
        and     $0xffffff, %r13
        jmp     2f
c7:     add     $7, %r13
        jmp     2f
c8:     mov     %r13, %rcx
        shr     $4, %rcx
        add     %rcx, %r13
        jmp     2f
c9:     or      $0x100, %r13
        jmp     2f
c10:    sub     $100, %r13
        jmp     2f
c11:    ror     $3, %r13d               /* 32-bit: zero-extends */
        jmp     2f
c12:    inc     %r13
        inc     %r13
        jmp     2f
c13:    xor     %r12, %r13
        and     $0xffffff, %r13
        jmp     2f
c14:    add     $1000, %r13
        jmp     2f
c15:    dec     %r13
        /* falls through */
2:      dec     %r14d
        jnz     1b

        /* ---- 2. nested calls 70 deep, then returns; repeated with 150 and 64/65 ---- */
        mov     $70, %edi
        call    nest
        cmp     $70, %rax
        jne     fail
        mov     $150, %edi
        call    nest
        cmp     $150, %rax
        jne     fail
        mov     $64, %edi
        call    nest
        mov     $65, %edi
        call    nest
        /* alternating-function chain 70 deep (different call sites per level) */
        mov     $70, %edi
        call    nest_a
        cmp     $70, %rax
        jne     fail

        /* ---- 3. returns that are not `ret` ---- */
        mov     %rsp, %rbx
        call    ret_by_jmp_mem          /* add $8,%rsp; jmp *-8(%rsp) */
        call    ret_by_pop_jmp          /* pop %r11; jmp *%r11 */
        mov     $5, %edi
        call    nest_jmpret             /* 5 deep, each level returns via jmp */
        cmp     %rsp, %rbx
        jne     fail

        /* ---- 4. escape from depth 100 by restoring %rsp, then ret ---- */
        mov     %rsp, escape_sp(%rip)
        mov     $100, %edi
        call    dive                    /* does not return normally */
        jmp     fail
escape_point:
        cmp     %rsp, %rbx
        jne     fail

        /* ---- 5. jrcxz loop ---- */
        mov     $33, %ecx
        xor     %edx, %edx
3:      jrcxz   4f
        add     %rcx, %rdx
        dec     %rcx
        jmp     3b
4:      cmp     $561, %rdx
        jne     fail

        /* print "jumptable_asm: ok\n" and exit 0 */
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

/* nest(n): recursion n deep, returns n */
nest:
        test    %edi, %edi
        jz      5f
        push    %rdi
        dec     %edi
        call    nest
        pop     %rdi
        inc     %rax
        ret
5:      xor     %eax, %eax
        ret

/* nest_a / nest_b: mutual recursion, two different call sites */
nest_a:
        test    %edi, %edi
        jz      6f
        dec     %edi
        call    nest_b
        inc     %rax
        ret
6:      xor     %eax, %eax
        ret
nest_b:
        test    %edi, %edi
        jz      7f
        dec     %edi
        call    nest_a
        inc     %rax
        ret
7:      xor     %eax, %eax
        ret

ret_by_jmp_mem:
        add     $8, %rsp
        jmp     *-8(%rsp)

ret_by_pop_jmp:
        pop     %r11
        jmp     *%r11

/* nest_jmpret(n): n deep, every level returns via pop+jmp */
nest_jmpret:
        test    %edi, %edi
        jz      8f
        dec     %edi
        call    nest_jmpret
8:      pop     %r11
        jmp     *%r11

/* dive(n): n deep, then abandons all frames and jumps to escape_point */
dive:
        test    %edi, %edi
        jz      9f
        dec     %edi
        call    dive
        jmp     fail                    /* never returned to */
9:      mov     escape_sp(%rip), %rsp
        lea     escape_point(%rip), %rax
        push    %rax
        ret                             /* ret to an address never pushed by a call */

        .section .rodata
        .align  8
jt:
        .quad   c0, c1, c2, c3, c4, c5, c6, c7
        .quad   c8, c9, c10, c11, c12, c13, c14, c15
msg_ok:
        .ascii  "jumptable_asm: ok\n"
        .set    msg_ok_len, . - msg_ok
msg_fail:
        .ascii  "jumptable_asm: FAIL\n"
        .set    msg_fail_len, . - msg_fail

        .data
        .align  8
escape_sp:
        .quad   0
        .section .note.GNU-stack,"",@progbits
