/* signals: sigaction handlers; raise() and kill(getpid()) repeatedly; a nested signal
 * raised inside a handler; a handler that calls functions; siglongjmp out of a handler;
 * and a SIGALRM (ITIMER_REAL) interrupting a busy loop at an arbitrary point.
 * No faults. Output is deterministic; only the SIGALRM arrival point varies. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static volatile sig_atomic_t usr1_count, usr2_count, alarm_fired, jumped;
static volatile unsigned long handler_work, busy_sink;
static sigjmp_buf jb;

__attribute__((noinline)) static unsigned long collatz_len(unsigned long n)
{
    unsigned long len = 0;
    while (n != 1) {
        n = (n & 1) ? 3 * n + 1 : n / 2;
        len++;
    }
    return len;
}

__attribute__((noinline)) static unsigned long fib(int n)
{
    return n < 2 ? (unsigned long)n : fib(n - 1) + fib(n - 2);
}

static void on_usr1(int sig)
{
    (void)sig;
    usr1_count++;
    handler_work += collatz_len(27 + (unsigned long)usr1_count) + fib(10);
    if (usr1_count % 3 == 0)
        raise(SIGUSR2); /* nested delivery inside this handler */
}

static void on_usr2(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    usr2_count++;
    handler_work += (unsigned long)sig + (si->si_pid == getpid() ? 1 : 0);
}

static void on_alarm(int sig)
{
    (void)sig;
    handler_work += fib(8);
    alarm_fired = 1;
}

static void on_hup_jump(int sig)
{
    (void)sig;
    jumped++;
    siglongjmp(jb, 7); /* leave the handler without sigreturn */
}

static void install(int sig, void (*h)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0)
        _exit(2);
}

int main(void)
{
    struct sigaction sa;
    install(SIGUSR1, on_usr1);
    install(SIGALRM, on_alarm);
    install(SIGHUP, on_hup_jump);
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr2;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR2, &sa, NULL) != 0)
        return 2;

    /* Synchronous self-signals. */
    for (int i = 0; i < 6; i++) {
        raise(SIGUSR1);
        kill(getpid(), SIGUSR1);
    }
    for (int i = 0; i < 4; i++)
        kill(getpid(), SIGUSR2);

    /* siglongjmp out of a handler, once. */
    int v = sigsetjmp(jb, 1);
    if (v == 0) {
        raise(SIGHUP);
        return 3; /* not reached */
    }
    /* SIGHUP must be unblocked again (mask restored by siglongjmp). */
    sigset_t cur;
    sigprocmask(SIG_BLOCK, NULL, &cur);
    if (sigismember(&cur, SIGHUP))
        return 4;

    /* SIGALRM interrupting a busy compute loop at an arbitrary point. */
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_usec = 100; /* one shot, 100 us */
    if (setitimer(ITIMER_REAL, &it, NULL) != 0)
        return 5;
    unsigned long x = 88172645463325252ul;
    for (unsigned long n = 0; !alarm_fired && n < 400000; n++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (x & 1)
            busy_sink += x;
    }
    /* If the loop bound was reached first, wait for the alarm without racing. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    sigprocmask(SIG_BLOCK, &block, &old);
    while (!alarm_fired)
        sigsuspend(&old);
    sigprocmask(SIG_SETMASK, &old, NULL);

    printf("signals: usr1=%d usr2=%d alarm=%d jumped=%d v=%d\n", (int)usr1_count,
           (int)usr2_count, (int)alarm_fired, (int)jumped, v);
    return 0;
}
