/* Issue 20: a traced program that ends by a default-fatal signal (tests/signals.sh).
 *
 *   sigdie raise SIG N      compute N rounds, then kill(getpid(), SIG) (dies of SIG)
 *   sigdie raise-thread SIG N  a second thread computes, then tgkill()s the main thread
 *   sigdie spin             compute until killed from outside ("ready" on stdout first)
 *   sigdie threads          4 threads compute until killed from outside
 *   sigdie handler          own SIGTERM handler: prints "caught 15" and exits 7
 *   sigdie reset            installs a SIGTERM handler, then SIG_DFL again, then spins
 *   sigdie pipe             writes numbers to stdout until SIGPIPE (like `seq | head -2`)
 *   sigdie ask              prints what sigaction() reports for SIGTERM, SIGINT and SIGPIPE
 *   sigdie block            blocks SIGTERM, raises it, prints whether it is pending, unblocks it
 *   sigdie ignore           ignores SIGTERM, raises it, prints "survived", then resets and raises it
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile unsigned long sink;

/* Branchy work: conditional branches, calls, returns, an indirect call. */
static unsigned long step(unsigned long x) { return x & 1 ? 3 * x + 1 : x / 2; }
static unsigned long twice(unsigned long x) { return step(step(x)); }
static unsigned long (*volatile fn)(unsigned long) = twice;

static void work(unsigned long rounds) {
    unsigned long x = 27;
    for (unsigned long i = 0; rounds == 0 || i < rounds; i++) {
        x = fn(x);
        if (x == 1)
            x = 27 + (i & 63);
        sink = x;
    }
}

static void *spinner(void *arg) {
    (void)arg;
    work(0);
    return NULL;
}

static pthread_t main_thread;
static int thread_sig;
static unsigned long thread_rounds;
static void *killer(void *arg) {
    (void)arg;
    work(thread_rounds);
    pthread_kill(main_thread, thread_sig);
    return NULL;
}

static void on_term(int sig) {
    char msg[32];
    int n = snprintf(msg, sizeof msg, "caught %d\n", sig);
    write(1, msg, n);
    _exit(7);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "spin";
    if (!strcmp(mode, "raise") && argc > 3) {
        work(strtoul(argv[3], 0, 0));
        kill(getpid(), atoi(argv[2]));
        work(1000);
        return 99; /* not reached */
    }
    if (!strcmp(mode, "raise-thread") && argc > 3) {
        pthread_t t;
        main_thread = pthread_self();
        thread_sig = atoi(argv[2]);
        thread_rounds = strtoul(argv[3], 0, 0);
        pthread_create(&t, NULL, killer, NULL);
        work(0);
    }
    if (!strcmp(mode, "threads")) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            pthread_create(&t[i], NULL, spinner, NULL);
        write(1, "ready\n", 6);
        work(0);
    }
    if (!strcmp(mode, "handler")) {
        signal(SIGTERM, on_term);
        write(1, "ready\n", 6);
        work(0);
    }
    if (!strcmp(mode, "reset")) {
        signal(SIGTERM, on_term);
        signal(SIGTERM, SIG_DFL);
        write(1, "ready\n", 6);
        work(0);
    }
    if (!strcmp(mode, "ask")) {
        static const int sigs[3] = { SIGTERM, SIGINT, SIGPIPE };
        for (int i = 0; i < 3; i++) {
            struct sigaction old;
            sigaction(sigs[i], NULL, &old);
            printf("%d: %s flags %x\n", sigs[i],
                   old.sa_handler == SIG_DFL ? "SIG_DFL" : old.sa_handler == SIG_IGN ? "SIG_IGN" : "handler",
                   (unsigned)old.sa_flags);
        }
        return 0;
    }
    if (!strcmp(mode, "block")) {
        sigset_t set, pend;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigprocmask(SIG_BLOCK, &set, NULL);
        kill(getpid(), SIGTERM);
        work(100000);
        sigpending(&pend);
        printf("pending %d\n", sigismember(&pend, SIGTERM));
        fflush(stdout);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        return 99; /* not reached */
    }
    if (!strcmp(mode, "ignore")) {
        signal(SIGTERM, SIG_IGN);
        kill(getpid(), SIGTERM);
        work(100000);
        printf("survived\n");
        fflush(stdout);
        signal(SIGTERM, SIG_DFL);
        kill(getpid(), SIGTERM);
        return 99; /* not reached */
    }
    if (!strcmp(mode, "pipe")) {
        char buf[32];
        for (unsigned long i = 1;; i++) {
            int n = snprintf(buf, sizeof buf, "%lu\n", i);
            if (write(1, buf, n) < 0)
                return 98; /* only without SIGPIPE */
            work(50);
        }
    }
    write(1, "ready\n", 6);
    work(0);
    return 0;
}
