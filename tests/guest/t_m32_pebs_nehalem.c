// pttrace-options: profile=nehalem,pebs=1,dtes64=0
/* Seed 001 §6.7.1 in 32-bit protected mode: without DTES64 (CPUID.1:ECX[2] = 0, `dtes64=0`) and
 * outside IA-32e mode the DS save area has the 32-bit format (PEBS fields at 10H-1CH, counter n's
 * reset at 20H + 8n) and every PEBS record is 40 bytes (EFLAGS, EIP, EAX, EBX, ECX, EDX, ESI,
 * EDI, EBP, ESP), whatever PERF_CAPABILITIES[11:8] says (here 1, the enhanced format of the
 * Nehalem profile). A real Nehalem has DTES64; `dtes64=0` stands for the parts of the seed's
 * 32-bit experiment. The guest finds the record length from the index after consecutive records,
 * checks the records field by field, nothing at the absolute maximum and the reload from the
 * reset field. Counting as t_pebs_nehalem: the enabling WRMSR is event 1, `add $1, %edi` number j
 * is event j + 1; PMC0 starts at 2^48 - P, reloads 2^48 - Q. */
#include "lib32/pebs32.h"

void m32_main(void)
{
    m32_pebs32_main("t_m32_pebs_nehalem: 32-bit protected mode, DTES64 = 0\n", 0x000106A5 /* Nehalem 06_1AH */, 1, 48);
}
