/* PicoRV32's interrupt instructions (its README, "Custom Instructions for IRQ
 * Handling"): custom-0 opcode, told apart by funct7. Written with the assembler's
 * `.insn` directive, so no macro package is needed. Interrupts on this core do not
 * follow the privileged specification: q0 holds the return address in a handler, q1
 * the pending mask; the core starts with every interrupt masked. */
#ifndef SYSTOLICA_PICORV32_H
#define SYSTOLICA_PICORV32_H

#include <stdint.h>

/* PicoRV32's own interrupt lines */
#define IRQ_TIMER    (1u << 0)
#define IRQ_TRAP     (1u << 1)   /* ebreak, ecall or an illegal instruction */
#define IRQ_BUSERROR (1u << 2)   /* a misaligned access */

/* Set the mask of disabled interrupts; return the previous one. */
static inline uint32_t maskirq(uint32_t mask)
{
    uint32_t old;
    __asm__ volatile (".insn r 0x0b, 6, 3, %0, %1, x0" : "=r"(old) : "r"(mask) : "memory");
    return old;
}

/* Sleep until an interrupt is pending, masked or not; return the pending mask. A
 * masked interrupt does not enter the handler and, if its line is level-sensitive,
 * is pending only while the line is high. */
static inline uint32_t waitirq(void)
{
    uint32_t pending;
    __asm__ volatile (".insn r 0x0b, 4, 4, %0, x0, x0" : "=r"(pending) : : "memory");
    return pending;
}

/* The core's cycle counter (low 32 bits): clock cycles since its reset. */
static inline uint32_t rdcycle(void)
{
    uint32_t cycles;
    __asm__ volatile ("rdcycle %0" : "=r"(cycles));
    return cycles;
}

#endif
