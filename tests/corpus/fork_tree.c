// Forked children (issue 19): a parent with three children and a grandchild, each process
// running its own branchy work, and code that diverges after the fork: before forking, the
// parent writes function A into an RWX page and calls it, then rewrites it with B and calls that;
// the first child calls the page as it inherited it (B, not the first bytes recorded there: the
// child's code.img must carry the forking thread's view), then writes B again and again; the
// parent writes C at the same address after the fork. Each process's code.img must give the
// decoder the bytes that process ran. The second child forks the grandchild; the third
// execs /bin/true (its stream ends at the execve, flushed first). Every process is waited for.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// int a(int n): sum of 1..n (a loop).
static const unsigned char fa[] = {0x31, 0xc0, 0x01, 0xf8, 0xff, 0xcf, 0x75, 0xfa, 0xc3};
// int b(int n): n < 5 ? n : n + 100 (one forward branch).
static const unsigned char fb[] = {0x89, 0xf8, 0x83, 0xff, 0x05, 0x7c, 0x03, 0x83, 0xc0, 0x64, 0xc3};
// int c(int n): 2n, plus one if n != 0.
static const unsigned char fc[] = {0x8d, 0x04, 0x3f, 0x85, 0xff, 0x74, 0x02, 0xff, 0xc0, 0xc3};

typedef int (*fn)(int);
static unsigned char *page;

static int call(const unsigned char *code, size_t len, int n)
{
    memcpy(page, code, len);
    return ((volatile fn)(void *)page)(n);
}

static unsigned long collatz(unsigned long lim)
{
    unsigned long best = 0;
    for (unsigned long i = 1; i < lim; i++) {
        unsigned long n = i, len = 0;
        while (n != 1) {
            n = (n & 1) ? 3 * n + 1 : n >> 1;
            len++;
        }
        if (len > best)
            best = len;
    }
    return best;
}

static unsigned long fib(unsigned n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

static unsigned long sieve(unsigned lim)
{
    static unsigned char comp[4000];
    unsigned long count = 0;
    memset(comp, 0, sizeof comp);
    for (unsigned i = 2; i < lim && i < sizeof comp; i++) {
        if (comp[i])
            continue;
        count++;
        for (unsigned j = i * 2; j < sizeof comp; j += i)
            comp[j] = 1;
    }
    return count;
}

// Wait for `pid`; returns its exit status (or 100 + signal).
static int reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return 99;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

int main(void)
{
    page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    long before = 0;
    for (int i = 1; i < 6; i++)
        before += call(fa, sizeof fa, i);
    before += call(fb, sizeof fb, 3);
    pid_t c1 = fork();
    if (c1 == 0) {
        long s = ((volatile fn)(void *)page)(7);
        for (int i = 0; i < 10; i++)
            s += call(fb, sizeof fb, i);
        _exit(s == 652 && collatz(200) == 124 ? 0 : 1);
    }
    pid_t c2 = fork();
    if (c2 == 0) {
        pid_t g = fork();
        if (g == 0)
            _exit(sieve(3000) == 430 ? 0 : 1);
        unsigned long f = fib(15);
        exit(f == 610 && reap(g) == 0 ? 0 : 1);
    }
    pid_t c3 = fork();
    if (c3 == 0) {
        execl("/bin/true", "true", (char *)0);
        _exit(2);
    }
    long after = 0;
    for (int i = 0; i < 10; i++)
        after += call(fc, sizeof fc, i);
    int r1 = reap(c1), r2 = reap(c2), r3 = reap(c3);
    printf("fork_tree: %ld %ld %lu children %d %d %d\n", before, after, collatz(100), r1, r2, r3);
    return r1 || r2 || r3;
}
