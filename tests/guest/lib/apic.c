/* Legacy PIC off, local APIC in xAPIC mode (SDM Vol. 3A, chapter "Advanced Programmable
 * Interrupt Controller (APIC)"). */
#include "guest.h"

uint32_t lapic_read(uint32_t reg) { return mmio_read32(LAPIC_BASE + reg); }
void lapic_write(uint32_t reg, uint32_t val) { mmio_write32(LAPIC_BASE + reg, val); }
void lapic_eoi(void) { lapic_write(LAPIC_EOI, 0); }

/* The BIOS leaves the 8259 PICs mapped at vectors 8-15, on top of exceptions: remap them to
 * 0x20-0x2F and mask every line. */
void pic_disable(void)
{
    static const uint8_t init[2][4] = { { 0x11, 0x20, 0x04, 0x01 }, { 0x11, 0x28, 0x02, 0x01 } };
    for (int i = 0; i < 4; i++) {
        outb(0x20 + (i ? 1 : 0), init[0][i]);
        outb(0xA0 + (i ? 1 : 0), init[1][i]);
    }
    outb(0x21, 0xFF);
    outb(0xA1, 0xFF);
}

static void spurious(struct trap_frame *f) { (void)f; } /* no EOI (SDM "Spurious Interrupt") */

/* IA32_APIC_BASE bit 11 = global enable, SVR bit 8 = software enable (SDM "Enabling or
 * Disabling the Local APIC", "Spurious Interrupt"). */
void lapic_enable(void)
{
    uint64_t base = rdmsr(IA32_APIC_BASE);
    if ((base & ~0xFFFULL) != LAPIC_BASE)
        test_fail("IA32_APIC_BASE is not at 0xFEE00000");
    if (!(base & (1 << 11)))
        wrmsr(IA32_APIC_BASE, base | (1 << 11));
    set_handler(SPURIOUS_VECTOR, spurious);
    lapic_write(LAPIC_SVR, 0x100 | SPURIOUS_VECTOR);
}

/* One-shot timer (SDM "APIC Timer"): divide by 1, LVT timer mode 0, unmasked. */
void lapic_timer_oneshot(uint8_t vector, uint32_t count)
{
    lapic_write(LAPIC_TIMER_DIV, 0xB);
    lapic_write(LAPIC_LVT_TIMER, vector);
    lapic_write(LAPIC_TIMER_INIT, count);
}
