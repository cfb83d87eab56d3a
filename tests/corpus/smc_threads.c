// Code written by one thread and run by another (issue 19), as JIT compilers do on background
// threads: the writer copies function A or B (different control flow) into one RWX page, 20
// rounds. In even rounds the writer calls it first (the runner then runs the writer's
// translation), in odd rounds only the runner calls it.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static const unsigned char fa[] = {
    0x31, 0xc0, 0x01, 0xf8, 0xff, 0xcf, 0x75, 0xfa, 0xc3, // sum 1..n (loop)
};
static const unsigned char fb[] = {
    0x89, 0xf8, 0x83, 0xff, 0x05, 0x7c, 0x03, 0x83, 0xc0, 0x64, 0xc3, // n < 5 ? n : n + 100
};

typedef int (*fn)(int);
static unsigned char *page;
static sem_t written, ran;
static long runner_sum;

static void *runner(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) {
        sem_wait(&written);
        runner_sum += ((volatile fn)(void *)page)(i % 6 + 1);
        sem_post(&ran);
    }
    return 0;
}

int main(void) {
    page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    sem_init(&written, 0, 0);
    sem_init(&ran, 0, 0);
    pthread_t t;
    pthread_create(&t, 0, runner, 0);
    long sum = 0;
    for (int i = 0; i < 20; i++) {
        if (i % 4 < 2)
            memcpy(page, fa, sizeof fa);
        else
            memcpy(page, fb, sizeof fb);
        if (i % 2 == 0)
            sum += ((volatile fn)(void *)page)(i % 5 + 1);
        sem_post(&written);
        sem_wait(&ran);
    }
    pthread_join(t, 0);
    printf("smc_threads: %ld %ld\n", sum, runner_sum);
    return 0;
}
