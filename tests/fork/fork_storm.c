// Forked children (issue 19): 4 threads fork 20 children each at the same time, while the other
// threads run, map and unmap memory and wait: every fork happens with other threads inside the
// plugin's callbacks (system calls, blocks, the encoder), the locks the children need must all
// be free in them. Each child does a little work and exits.
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile unsigned long sink;

static unsigned long work(unsigned long x)
{
    unsigned long s = 0;
    for (unsigned long i = 0; i < x; i++)
        s += (i & 1) ? i * 3 : i >> 1;
    return s;
}

static void *forker(void *arg)
{
    long id = (long)arg;
    int bad = 0;
    for (int i = 0; i < 20; i++) {
        pid_t c = fork();
        if (c == 0)
            _exit(work(200 + id) == 0);
        void *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(m, 4096);
        sink += work(1000);
        int st;
        bad |= waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    return (void *)(long)bad;
}

int main(void)
{
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, forker, (void *)i);
    long bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad |= (long)r;
    }
    printf("fork_storm: %s\n", bad ? "a child failed" : "80 children");
    return bad;
}
