/* sigstorm: a periodic SIGALRM (ITIMER_REAL, 100 us) interrupts branchy code, indirect calls and
 * returns many times at arbitrary instruction-block boundaries; the handler itself calls functions.
 * The number of signals varies from run to run; the ground truth and the trace come from the same
 * run, so the comparison stays exact. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static volatile sig_atomic_t hits;
static volatile unsigned long sink;

static unsigned long mix(unsigned long x) { return (x ^ (x >> 7)) * 0x9E3779B97F4A7C15ul; }

static void on_alarm(int sig) {
    (void)sig;
    sink += mix(hits);
    hits++;
}

static unsigned long op_add(unsigned long a) { return a + 3; }
static unsigned long op_xor(unsigned long a) { return a ^ 0x55; }
static unsigned long op_rot(unsigned long a) { return (a << 5) | (a >> 59); }
static unsigned long (*const ops[3])(unsigned long) = { op_add, op_xor, op_rot };

static unsigned long work(unsigned long seed, int n) {
    unsigned long acc = seed;
    for (int i = 0; i < n; i++) {
        if (acc & 1)
            acc = ops[acc % 3](acc);
        else if (acc & 2)
            acc = mix(acc);
        else
            acc += i;
    }
    return acc;
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 100 }, { 0, 100 } };
    setitimer(ITIMER_REAL, &it, NULL);
    unsigned long acc = 1;
    /* Bounded: stop after 40 signals or 400 rounds, whichever comes first. */
    for (int round = 0; round < 400 && hits < 40; round++)
        acc = work(acc, 2000);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    printf("sigstorm: done%s\n", acc == 0 ? " (zero)" : "");
    return 0;
}
