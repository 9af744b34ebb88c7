/* The firmware's runtime: the chip's register window, and the two library
 * functions the compiler may call on its own (memcpy, memset). */
#ifndef SYSTOLICA_RUNTIME_H
#define SYSTOLICA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "regs.h"

/* Register `r` of the chip (systolica/arch/regs.py) is the word at REGS_BASE + 4*r. */
static inline uint32_t reg_read(unsigned r)
{
    return *(volatile uint32_t *)(REGS_BASE + 4u * r);
}

static inline void reg_write(unsigned r, uint32_t value)
{
    *(volatile uint32_t *)(REGS_BASE + 4u * r) = value;
}

void *memcpy(void *restrict dst, const void *restrict src, size_t n);
void *memset(void *dst, int c, size_t n);

#endif
