/* Ring 3: SYSCALL set-up, enter_user(), the system-call dispatcher (SYSCALL and int $0x80). */
#include "guest.h"

extern char syscall_entry[], user_exit_syscall[], user_exit_int80[];
uint64_t enter_user_asm(uint64_t rip, uint64_t rsp, uint64_t ret_tramp);
_Noreturn void user_return(uint64_t value);

static uint8_t default_user_stack[16384] __attribute__((aligned(16)));
static syscall_hook_t syscall_hook;

void syscall_dispatch(struct trap_frame *f);

/* SDM Vol. 3A §5.8.8: EFER.SCE enables SYSCALL/SYSRET; STAR[47:32] is the kernel CS (SS =
 * CS + 8), STAR[63:48] + 16 / + 8 the user CS / SS loaded by 64-bit SYSRET; LSTAR the entry;
 * FMASK the RFLAGS bits cleared on entry (TF, DF, IF, IOPL, AC, NT). */
void syscall_init(void)
{
    wrmsr(IA32_EFER, rdmsr(IA32_EFER) | EFER_SCE);
    wrmsr(IA32_STAR, ((uint64_t)(USER32_CS & ~3) << 48) | ((uint64_t)KERNEL_CS << 32));
    wrmsr(IA32_LSTAR, (uint64_t)syscall_entry);
    wrmsr(IA32_FMASK, 0x47700);
    set_handler(SYSCALL_VECTOR, syscall_dispatch);
}

uint64_t enter_user_ret(user_fn_t fn, void *user_stack, int how)
{
    if (!user_stack)
        user_stack = default_user_stack + sizeof(default_user_stack);
    char *tramp = how == USER_RET_INT80 ? user_exit_int80 : user_exit_syscall;
    return enter_user_asm((uint64_t)user_ptr((void *)fn), (uint64_t)user_ptr(user_stack),
                          (uint64_t)user_ptr(tramp));
}

uint64_t enter_user(user_fn_t fn, void *user_stack)
{
    return enter_user_ret(fn, user_stack, USER_RET_SYSCALL);
}

syscall_hook_t set_syscall_hook(syscall_hook_t fn)
{
    syscall_hook_t old = syscall_hook;
    syscall_hook = fn;
    return old;
}

/* Called from syscall_entry (vector SYSCALL_FRAME) and as the int $0x80 handler. */
void syscall_dispatch(struct trap_frame *f)
{
    switch (f->rax) {
    case SYS_EXIT:
        user_return(f->rdi);
    case SYS_ECHO:
        f->rax = f->rdi;
        break;
    case SYS_PUTS:
        puts_serial((const char *)f->rdi);
        f->rax = 0;
        break;
    default:
        f->rax = syscall_hook ? syscall_hook(f) : (uint64_t)-1;
    }
}
