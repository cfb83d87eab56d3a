/* handler_first: a function that is called directly (so QEMU translates its first block)
 * before sigaction makes it the SIGALRM handler; an interval timer then interrupts a busy loop
 * at arbitrary points 10 times. The plugin must recognise the handler's entry block as a signal
 * delivery (FUP at the interrupted instruction, read from the signal frame) although that block
 * was translated before the handler existed (issue 13: the "block starts at a handler" flag is
 * set at translation and again when a handler is registered). No faults; deterministic output;
 * only the arrival points vary. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

static volatile unsigned long sink;
static volatile int delivered;

__attribute__((noinline)) static void on_alarm(int sig)
{
    if (sig == SIGALRM)
        delivered++;
    for (int i = 0; i < 5; i++)
        sink += (unsigned long)i * 3;
}

int main(void)
{
    for (int i = 0; i < 3; i++)
        on_alarm(0); /* translated as ordinary code first */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 2000 }, { 0, 2000 } };
    setitimer(ITIMER_REAL, &it, NULL);
    unsigned long x = 27;
    while (delivered < 10) {
        x = (x & 1) ? 3 * x + 1 : x / 2;
        if (x == 1)
            x = 27 + (sink & 63);
    }
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    printf("delivered %d\n", delivered);
    return 0;
}
