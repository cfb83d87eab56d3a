// Self-modifying code (issue 19): three small functions with different control flow written in
// turn into one RWX page and called, 20 rounds. A and B start at the same address; C starts 4
// bytes in, overlapping both. The decoder must give libipt the version each call ran.
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

// int a(int n): sum of 1..n (a loop: conditional branch taken n-1 times).
static const unsigned char fa[] = {
    0x31, 0xc0,       // xor eax,eax
    0x01, 0xf8,       // 1: add eax,edi
    0xff, 0xcf,       // dec edi
    0x75, 0xfa,       // jnz 1b
    0xc3,             // ret
};
// int b(int n): n < 5 ? n : n + 100 (one forward branch).
static const unsigned char fb[] = {
    0x89, 0xf8,       // mov eax,edi
    0x83, 0xff, 0x05, // cmp edi,5
    0x7c, 0x03,       // jl 1f
    0x83, 0xc0, 0x64, // add eax,100
    0xc3,             // 1: ret
};
// int c(int n): 2n, plus one if n != 0.
static const unsigned char fc[] = {
    0x8d, 0x04, 0x3f, // lea eax,[rdi+rdi]
    0x85, 0xff,       // test edi,edi
    0x74, 0x02,       // jz 1f
    0xff, 0xc0,       // inc eax
    0xc3,             // 1: ret
};

typedef int (*fn)(int);

int main(void) {
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    long sum = 0;
    for (int i = 0; i < 20; i++) {
        memcpy(page, fa, sizeof fa);
        sum += ((volatile fn)(void *)page)(i % 7 + 1);
        memcpy(page, fb, sizeof fb);
        sum += ((volatile fn)(void *)page)(i);
        memcpy(page + 4, fc, sizeof fc);
        sum += ((volatile fn)(void *)(page + 4))(i % 2);
    }
    printf("smc: %ld\n", sum);
    return sum == 1944 ? 0 : 1;
}
