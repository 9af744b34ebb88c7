/* The management core's kernels: operations the core computes itself, on tensors in
 * DRAM it reaches through its window (docs/management-core.md, "The core's kernels"). */
#ifndef SYSTOLICA_KERNELS_H
#define SYSTOLICA_KERNELS_H

#include <stdint.h>

/* Run kernel number `kernel` on the descriptor at DRAM byte `at`, touching no DRAM
 * byte at or past `dram_bytes`. Returns 0, or the FwStepProblem that stopped it
 * before it wrote anything. */
uint32_t run_kernel(uint32_t kernel, uint32_t at, uint32_t dram_bytes);

#endif
