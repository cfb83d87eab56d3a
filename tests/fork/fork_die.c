// Forked children that die of a signal (issue 19). The first child runs branchy work, then
// stores through a null pointer and dies of SIGSEGV (QEMU's core-dump path): its trace up to the
// fault is kept. The second raises SIGTERM at itself (the plugin's finisher in the child ends
// its streams, then it dies of SIGTERM). The parent checks how each died and exits normally.
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static int died_of(pid_t pid, int sig)
{
    int st = 0;
    return waitpid(pid, &st, 0) == pid && WIFSIGNALED(st) && WTERMSIG(st) == sig;
}

int main(void)
{
    pid_t segv = fork();
    if (segv == 0) {
        volatile unsigned long f = fib(14);
        *(volatile unsigned long *)(f - 377) = f; // fib(14) = 377: address 0
        _exit(1);
    }
    int a = died_of(segv, SIGSEGV);
    pid_t term = fork();
    if (term == 0) {
        volatile unsigned long f = fib(12);
        raise(f == 144 ? SIGTERM : SIGKILL);
        _exit(1);
    }
    int b = died_of(term, SIGTERM);
    printf("fork_die: %s, %s\n", a ? "SIGSEGV" : "no SIGSEGV", b ? "SIGTERM" : "no SIGTERM");
    return !(a && b);
}
