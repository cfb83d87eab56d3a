/* Every MSR number the freestanding guests (64-bit lib/ and 32-bit lib32/) use, one name each.
 * Names follow the SDM (Vol. 4, "Model-Specific Registers"): IA32_* for architectural MSRs
 * (Table 2-2), MSR_* for model-specific ones. Only numbers here: no bit fields, no code, so it
 * builds in both the 64-bit and the -m32 guests. */
#ifndef GUEST_MSR_H
#define GUEST_MSR_H

/* ---- APIC, misc ---- */
#define IA32_APIC_BASE                 0x01B /* IA32_APIC_BASE: APIC base address, BSP, enable */
#define IA32_MISC_ENABLE               0x1A0 /* IA32_MISC_ENABLE: [7] PMU available, [11] BTS/[12] PEBS unavailable */
#define IA32_DEBUGCTL                  0x1D9 /* IA32_DEBUGCTL: LBR, BTF, TR, BTS, BTINT, FREEZE_* */

/* ---- PMU (SDM Vol. 3B ch. 20 "Performance Monitoring") ---- */
#define IA32_PMC0                      0x0C1 /* IA32_PMC0: general-purpose counter 0 (legacy write width) */
#define IA32_PERFEVTSEL0               0x186 /* IA32_PERFEVTSEL0: event select for IA32_PMC0 */
#define IA32_FIXED_CTR0                0x309 /* IA32_FIXED_CTR0: fixed counter 0, INST_RETIRED.ANY */
#define IA32_PERF_CAPABILITIES         0x345 /* IA32_PERF_CAPABILITIES: LBR format, PEBS format, FW_WRITE */
#define IA32_FIXED_CTR_CTRL            0x38D /* IA32_FIXED_CTR_CTRL: fixed counter enables, PMI */
#define IA32_PERF_GLOBAL_STATUS        0x38E /* IA32_PERF_GLOBAL_STATUS: overflow, PEBS/DS buffer status */
#define IA32_PERF_GLOBAL_CTRL          0x38F /* IA32_PERF_GLOBAL_CTRL: global counter enables */
#define IA32_PERF_GLOBAL_STATUS_RESET  0x390 /* IA32_PERF_GLOBAL_STATUS_RESET (IA32_PERF_GLOBAL_OVF_CTRL before PMU v4) */
#define IA32_PERF_GLOBAL_STATUS_SET    0x391 /* IA32_PERF_GLOBAL_STATUS_SET (PMU v4) */
#define IA32_PERF_GLOBAL_INUSE         0x392 /* IA32_PERF_GLOBAL_INUSE (PMU v4) */
#define IA32_A_PMC0                    0x4C1 /* IA32_A_PMC0: full-width alias of IA32_PMC0 */

/* ---- PEBS / DS save area (BTS, PEBS) ---- */
#define IA32_PEBS_ENABLE               0x3F1 /* IA32_PEBS_ENABLE: per-counter PEBS enables */
#define MSR_PEBS_DATA_CFG              0x3F2 /* MSR_PEBS_DATA_CFG: adaptive PEBS record groups */
#define IA32_DS_AREA                   0x600 /* IA32_DS_AREA: linear address of the DS save area */

/* ---- model-specific LBR stack ---- */
#define MSR_LBR_SELECT                 0x1C8 /* MSR_LBR_SELECT: LBR filtering */
#define MSR_LBR_TOS                    0x1C9 /* MSR_LASTBRANCH_TOS: top-of-stack index */
#define MSR_LBR_FROM                   0x680 /* MSR_LASTBRANCH_0_FROM_IP (0x680 + n) */
#define MSR_LBR_TO                     0x6C0 /* MSR_LASTBRANCH_0_TO_IP (0x6C0 + n) */
#define MSR_LBR_INFO                   0xDC0 /* MSR_LBR_INFO_0 (0xDC0 + n): mispred, TSX, cycle count */

/* ---- model-specific LBR stack of the Intel Core microarchitecture (Core 2, 06_17H) ---- */
#define MSR_CORE_LBR_FROM              0x040 /* MSR_LASTBRANCH_0_FROM_IP (0x40 + n, n < 4) */
#define MSR_CORE_LBR_TO                0x060 /* MSR_LASTBRANCH_0_TO_IP (0x60 + n, n < 4) */

/* ---- architectural LBR (SDM Vol. 3B "Architectural Last Branch Records") ---- */
#define IA32_LBR_INFO                  0x1200 /* IA32_LBR_x_INFO (0x1200 + n) */
#define IA32_LBR_CTL                   0x14CE /* IA32_LBR_CTL: enable, OS/USR, branch-type filters */
#define IA32_LBR_DEPTH                 0x14CF /* IA32_LBR_DEPTH: number of LBR entries in use */
#define IA32_LBR_FROM                  0x1500 /* IA32_LBR_x_FROM_IP (0x1500 + n) */
#define IA32_LBR_TO                    0x1600 /* IA32_LBR_x_TO_IP (0x1600 + n) */

/* ---- Intel PT (SDM Vol. 3C ch. 33 "Intel Processor Trace") ---- */
#define IA32_RTIT_OUTPUT_BASE          0x560 /* IA32_RTIT_OUTPUT_BASE: ToPA table / single-range base */
#define IA32_RTIT_OUTPUT_MASK_PTRS     0x561 /* IA32_RTIT_OUTPUT_MASK_PTRS: mask / table and output offsets */
#define IA32_RTIT_CTL                  0x570 /* IA32_RTIT_CTL: TraceEn and the packet enables */
#define IA32_RTIT_STATUS               0x571 /* IA32_RTIT_STATUS: FilterEn, ContextEn, TriggerEn, Error, Stopped */
#define IA32_RTIT_CR3_MATCH            0x572 /* IA32_RTIT_CR3_MATCH: CR3 filter value */
#define IA32_RTIT_ADDR0_A              0x580 /* IA32_RTIT_ADDR0_A: address range 0 start */
#define IA32_RTIT_ADDR0_B              0x581 /* IA32_RTIT_ADDR0_B: address range 0 end */
#define IA32_RTIT_ADDR1_A              0x582 /* IA32_RTIT_ADDR1_A: address range 1 start */
#define IA32_RTIT_ADDR1_B              0x583 /* IA32_RTIT_ADDR1_B: address range 1 end */
#define IA32_RTIT_ADDR2_A              0x584 /* IA32_RTIT_ADDR2_A: absent on a 2-range profile */

/* ---- Atom RTIT (pre-Intel-PT real-time instruction trace, model-specific) ---- */
#define MSR_RTIT_CTL                   0x768 /* RTIT_CTL: trace enable, filters */
#define MSR_RTIT_STATUS                0x769 /* RTIT_STATUS */
#define MSR_RTIT_EVENTS                0x76C /* RTIT_EVENTS */
#define MSR_RTIT_LAST_LIP              0x76E /* RTIT_LAST_LIP */
#define MSR_RTIT_BASE_ADDR             0x770 /* RTIT_BASE_ADDR: output buffer base */
#define MSR_RTIT_LIMIT_MASK            0x771 /* RTIT_LIMIT_MASK: output buffer size mask */
#define MSR_RTIT_OFFSET                0x772 /* RTIT_OFFSET: output write offset */
#define MSR_RTIT_PKT_CNT               0x77C /* RTIT_PKT_CNT */
#define MSR_RTIT_TNT_BUFF              0x77D /* RTIT_TNT_BUFF: branch results not yet in a TNT packet */

/* ---- SYSCALL/SYSRET, long mode ---- */
#define IA32_EFER                      0xC0000080 /* IA32_EFER: SCE, LME, LMA, NXE */
#define IA32_STAR                      0xC0000081 /* IA32_STAR: SYSCALL/SYSRET CS and SS selectors */
#define IA32_LSTAR                     0xC0000082 /* IA32_LSTAR: SYSCALL RIP in 64-bit mode */
#define IA32_FMASK                     0xC0000084 /* IA32_FMASK: SYSCALL RFLAGS mask */

#endif
