/* syscalls: many different system calls (and vDSO clock_gettime) between user code. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

int main(void)
{
    unsigned long ck = 0;

    int dn = open("/dev/null", O_WRONLY);
    if (dn < 0)
        return 2;
    for (int i = 0; i < 20; i++)
        if (write(dn, "hello, null\n", 12) != 12)
            return 3;

    /* First bytes of our own executable: the ELF magic. */
    int fd = open("/proc/self/exe", O_RDONLY);
    if (fd < 0)
        return 4;
    unsigned char hdr[16];
    if (read(fd, hdr, sizeof hdr) != (ssize_t)sizeof hdr)
        return 5;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 16)
        return 6;
    if (lseek(fd, 0, SEEK_SET) != 0)
        return 7;
    close(fd);
    if (memcmp(hdr, "\177ELF", 4) != 0)
        return 8;

    pid_t pid = getpid();
    if (pid <= 0 || getppid() < 0)
        return 9;
    (void)getuid();
    (void)getgid();
    (void)syscall(SYS_gettid);

    struct timespec ts;
    for (int i = 0; i < 10; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts); /* usually the vDSO */
        clock_gettime(CLOCK_REALTIME, &ts);
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    (void)time(NULL);
    struct timespec zero = {0, 0};
    nanosleep(&zero, NULL);
    sched_yield();

    struct utsname un;
    if (uname(&un) != 0)
        return 10;

    /* mmap / mprotect / munmap */
    for (int i = 1; i <= 8; i++) {
        size_t len = (size_t)i * 4096;
        unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            return 11;
        for (size_t off = 0; off < len; off += 4096)
            p[off] = (unsigned char)(off >> 12);
        ck += p[len - 4096];
        mprotect(p, len, PROT_READ);
        munmap(p, len);
    }

    /* brk/mmap through malloc of large and growing blocks */
    void *blocks[6];
    for (int i = 0; i < 6; i++) {
        size_t sz = (size_t)(64 + i * 96) * 1024; /* 64 KiB .. 544 KiB */
        blocks[i] = malloc(sz);
        if (!blocks[i])
            return 12;
        memset(blocks[i], i, 4096);
        ck += ((unsigned char *)blocks[i])[100];
    }
    void *sb = sbrk(0);
    if (brk((char *)sb + 65536) == 0)
        brk(sb);
    for (int i = 5; i >= 0; i--)
        free(blocks[i]);

    /* a pipe round trip */
    int pfd[2];
    if (pipe(pfd) != 0)
        return 13;
    char buf[8];
    if (write(pfd[1], "pipe", 4) != 4 || read(pfd[0], buf, 4) != 4 || memcmp(buf, "pipe", 4))
        return 14;
    close(pfd[0]);
    close(pfd[1]);

    /* a few hundred cheap syscalls in a loop */
    for (int i = 0; i < 300; i++) {
        switch (i % 4) {
        case 0: ck += (unsigned long)(getpid() == pid); break;
        case 1: ck += (unsigned long)(syscall(SYS_getppid) > 0); break;
        case 2: ck += (unsigned long)(write(dn, &i, 1) == 1); break;
        default: ck += (unsigned long)(lseek(dn, 0, SEEK_CUR) >= 0); break;
        }
    }
    close(dn);

    printf("syscalls: ck=%lu\n", ck);
    return 0;
}
