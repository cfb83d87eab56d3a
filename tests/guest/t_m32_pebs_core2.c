// pttrace-options: profile=core2,pebs=1,dtes64=0
/* Seed 001 §6.7.1 in 32-bit protected mode: without DTES64 (CPUID.1:ECX[2] = 0, `dtes64=0`) and
 * outside IA-32e mode the DS save area has the 32-bit format (PEBS fields at 10H-1CH, counter n's
 * reset at 20H + 8n) and every PEBS record is 40 bytes (EFLAGS, EIP, EAX, EBX, ECX, EDX, ESI,
 * EDI, EBP, ESP) instead of format 0's 144 bytes (the Core 2 profile, Penryn 06_17H: PEBS on
 * PMC0 only, 40-bit counters). A real Penryn has DTES64; `dtes64=0` stands for the seed's 32-bit
 * experiment (the parts before DTES64). The guest finds the record length from the index after
 * consecutive records, checks the records field by field, nothing at the absolute maximum and the
 * reload from the reset field (32-bit DS area: PMC0's at 20H). Counting as t_pebs_core2: the
 * enabling WRMSR is event 1, `add $1, %edi` number j is event j + 1; PMC0 starts at 2^40 - P,
 * reloads 2^40 - Q. */
#include "lib32/pebs32.h"

void m32_main(void)
{
    m32_pebs32_main("t_m32_pebs_core2: 32-bit protected mode, DTES64 = 0\n", 0x0001067A /* Penryn 06_17H */, 0, 40);
}
