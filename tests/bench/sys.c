/* make bench: a system-call-heavy loop. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? strtol(argv[1], NULL, 0) : 300000;
    long s = 0;
    for (long i = 0; i < n; i++)
        s += syscall(SYS_getppid) + (i & 3);
    printf("syscalls %ld sum %ld\n", n, s);
    return 0;
}
