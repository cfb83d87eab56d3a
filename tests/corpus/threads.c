/* threads: 4 pthreads each running a different branchy computation, all joined;
 * plus a mutex/condvar ping-pong handoff between main and a fifth thread.
 * Every thread ends through return or pthread_exit and is joined before main returns. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static unsigned long results[4];

static void *w_collatz(void *arg)
{
    unsigned long best = 0, besti = 0;
    for (unsigned long i = 1; i < 300; i++) {
        unsigned long n = i, len = 0;
        while (n != 1) {
            n = (n & 1) ? 3 * n + 1 : n >> 1;
            len++;
        }
        if (len > best) {
            best = len;
            besti = i;
        }
    }
    *(unsigned long *)arg = best * 1000 + besti;
    return NULL;
}

static void *w_sieve(void *arg)
{
    static unsigned char comp[8000];
    unsigned long count = 0;
    memset(comp, 0, sizeof comp);
    for (unsigned i = 2; i < sizeof comp; i++) {
        if (comp[i])
            continue;
        count++;
        for (unsigned j = i * 2; j < sizeof comp; j += i)
            comp[j] = 1;
    }
    *(unsigned long *)arg = count;
    pthread_exit(NULL);
}

static void *w_hash(void *arg)
{
    static const char text[] = "the quick brown fox jumps over the lazy dog 0123456789";
    uint32_t h = 2166136261u;
    unsigned long vowels = 0;
    for (int r = 0; r < 100; r++) {
        for (const char *p = text; *p; p++) {
            switch (*p) {
            case 'a': case 'e': case 'i': case 'o': case 'u': vowels++; break;
            case ' ': h ^= (uint32_t)r; break;
            default: break;
            }
            h = (h ^ (uint8_t)*p) * 16777619u;
        }
    }
    *(unsigned long *)arg = (unsigned long)h + vowels;
    return NULL;
}

struct node { int left, right, val; };
static struct node tree[1023];
static unsigned long tree_sum(int i, int depth)
{
    if (i < 0)
        return 0;
    unsigned long s = (unsigned long)tree[i].val;
    if (tree[i].val & 1)
        s += tree_sum(tree[i].left, depth + 1);
    else
        s ^= tree_sum(tree[i].right, depth + 1) + (unsigned long)depth;
    return s + tree_sum(tree[i].left >= 0 ? tree[i].right : -1, depth + 1);
}
static void *w_tree(void *arg)
{
    for (int i = 0; i < 1023; i++) {
        tree[i].left = 2 * i + 1 < 1023 ? 2 * i + 1 : -1;
        tree[i].right = 2 * i + 2 < 1023 ? 2 * i + 2 : -1;
        tree[i].val = (i * 7919) % 101;
    }
    unsigned long s = 0;
    for (int r = 0; r < 4; r++)
        s += tree_sum(0, r);
    *(unsigned long *)arg = s;
    return NULL;
}

/* ---- mutex/condvar handoff ---- */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int turn; /* 0: main's turn, 1: ponger's turn */
static int rounds_done;
#define ROUNDS 50

static void *ponger(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&mu);
        while (turn != 1)
            pthread_cond_wait(&cv, &mu);
        rounds_done++;
        turn = 0;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(void)
{
    void *(*const fns[4])(void *) = {w_collatz, w_sieve, w_hash, w_tree};
    pthread_t t[4], p;
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, fns[i], &results[i]) != 0)
            return 2;
    if (pthread_create(&p, NULL, ponger, NULL) != 0)
        return 3;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&mu);
        turn = 1;
        pthread_cond_signal(&cv);
        while (turn != 0)
            pthread_cond_wait(&cv, &mu);
        pthread_mutex_unlock(&mu);
    }
    for (int i = 0; i < 4; i++)
        if (pthread_join(t[i], NULL) != 0)
            return 4;
    if (pthread_join(p, NULL) != 0)
        return 5;
    printf("threads: collatz=%lu primes=%lu hash=%lu tree=%lu rounds=%d\n", results[0],
           results[1], results[2], results[3], rounds_done);
    return 0;
}
