// Code that rewrites itself in place (issue 19): a function in an RWX page stores its argument
// into the immediate of its own next instruction and then runs it, 20 times. QEMU stops the
// block at the store, restarts the store as a block of its own and translates the rest anew:
// every call runs a new version of the block it is in.
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static const unsigned char f[] = {
    0x40, 0x88, 0x3d, 0x01, 0x00, 0x00, 0x00, // mov [rip+1],dil: the low byte of the imm32 below
    0xb8, 0x00, 0x00, 0x00, 0x00,             // mov eax,imm32
    0x85, 0xc0,                               // test eax,eax
    0x74, 0x02,                               // jz 1f
    0xff, 0xc0,                               // inc eax
    0xc3,                                     // 1: ret
};

typedef int (*fn)(int);

int main(void) {
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memcpy(page, f, sizeof f);
    long sum = 0;
    for (int i = 0; i < 20; i++)
        sum += ((volatile fn)(void *)page)(i % 3);
    printf("smc_inplace: %ld\n", sum);
    return sum == 32 ? 0 : 1;
}
