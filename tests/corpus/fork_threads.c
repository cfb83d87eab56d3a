// Forked children (issue 19): fork from a multithreaded parent. Three threads run branchy work
// while one of them (not the main thread) forks; the child has that thread alone, runs its own
// work in it and in a thread of its own, forks once more and exits. The parent's threads keep running through the fork and are
// joined.
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static unsigned long hash(unsigned rounds)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog";
    unsigned h = 2166136261u, vowels = 0;
    for (unsigned r = 0; r < rounds; r++)
        for (const char *p = text; *p; p++) {
            switch (*p) {
            case 'a': case 'e': case 'i': case 'o': case 'u': vowels++; break;
            case ' ': h ^= r; break;
            default: break;
            }
            h = (h ^ (unsigned char)*p) * 16777619u;
        }
    return h + vowels;
}

static unsigned long walk(unsigned depth, unsigned long x)
{
    if (depth == 0)
        return x & 7;
    return (x & 1 ? walk(depth - 1, x * 3 + 1) : walk(depth - 1, x >> 1)) + walk(depth - 1, x + depth) % 3;
}

static int reap(pid_t pid)
{
    int st;
    if (waitpid(pid, &st, 0) != pid)
        return 99;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}

static unsigned long results[3];
static int child_status = -1;

static void *busy(void *arg)
{
    unsigned long *r = arg;
    for (int i = 0; i < 30; i++)
        *r += hash(20) + walk(8, (unsigned long)i);
    return NULL;
}

static void *child_thread(void *arg)
{
    *(unsigned long *)arg = walk(9, 11);
    return NULL;
}

static void *forker(void *arg)
{
    unsigned long *r = arg;
    *r = walk(10, 5);
    pid_t c = fork();
    if (c == 0) {
        // Only this thread exists in the child; it starts one of its own.
        pthread_t t;
        unsigned long w = 0;
        pthread_create(&t, NULL, child_thread, &w);
        unsigned long h = hash(50);
        pthread_join(t, NULL);
        pid_t g = fork();
        if (g == 0)
            _exit(walk(9, 3) ? 0 : 1);
        _exit(h && w && reap(g) == 0 ? 0 : 1);
    }
    *r += hash(40);
    child_status = reap(c);
    return NULL;
}

int main(void)
{
    pthread_t t[3];
    // The forker is the newest thread: QEMU 10.2 keeps the parent's vCPU indices in a forked
    // child's plugin state and aborts with any plugin loaded (qemu_plugin_vcpu_init__async:
    // assertion failed) when the child starts a thread while a thread newer than the forking one
    // lived in the parent. The child's new vCPU then gets an index no parent thread had.
    pthread_create(&t[0], NULL, busy, &results[0]);
    pthread_create(&t[2], NULL, busy, &results[2]);
    pthread_create(&t[1], NULL, forker, &results[1]);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("fork_threads: child %d, %s\n", child_status, results[0] == results[2] ? "ok" : "differ");
    return child_status != 0;
}
