/* The command loop: run the step table the host left in the mailbox, one step after
 * the other, and signal the host once, at the end.
 *
 * A kernel step runs one of the core's kernels (kernels.c) on its descriptor in DRAM.
 * A chip step writes the program's configuration (PROG_ADDR, PROG_LEN, PROG_FETCH = 0:
 * the chip fetches the whole program from DRAM, and the UBUF region), writes
 * CTRL.START and sleeps in `waitirq` until the accelerator's interrupt line is high,
 * that is until the run has stopped (done or fault): the line is masked, so no
 * handler runs, and `waitirq` only wakes the core. The loop re-reads STATUS after each
 * wake-up, so a wake-up for another reason costs a register read, never a wrong step.
 * A fault stops the table: its code, program index and cycle go into the mailbox.
 *
 * The configuration registers are double-buffered (docs/management-core.md): with
 * FW_FLAG_OVERLAP the loop writes the next chip step's configuration while the
 * current one runs, and starts it as soon as the current one has stopped (having
 * read its STATUS and CYCLES; the bookkeeping follows the START); without,
 * it writes each step's configuration after the previous has stopped (so the host
 * can measure what the overlap saves). Each step records the core's cycle counter at
 * its START and the chip's CYCLES of its run: the run's timeline.
 *
 * The result goes into the mailbox and, last, into CORE_MSG, which interrupts the
 * host. The mailbox's layout and every number of the chip come from the generated
 * headers (table.h, regs.h: systolica.firmware.core_image). */
#include "kernels.h"
#include "picorv32.h"
#include "runtime.h"
#include "table.h"

__attribute__((section(".mailbox"))) volatile struct fw_mailbox fw_mailbox;

static void finish(uint32_t result)
{
    fw_mailbox.result = result;
    reg_write(REG_CORE_MSG, result);     /* the one signal to the host, last */
}

static void stop_at(uint32_t step, uint32_t result, uint32_t code)
{
    fw_mailbox.fault_step = step;
    fw_mailbox.fault_code = code;
    finish(result);
}

/* Sleep until the chip has stopped; return its STATUS. */
static uint32_t wait_stopped(void)
{
    uint32_t status;
    for (;;) {
        status = reg_read(REG_STATUS);
        if (!(status & STATUS_RUNNING) && (status & (STATUS_DONE | STATUS_ERROR)))
            return status;
        waitirq();
    }
}

/* Write the UBUF region so that every intermediate pair is one the chip accepts (no
 * UBUF first), and read it back: the chip ignores a pair it does not allow. */
static int set_ubuf(uint32_t base, uint32_t rows)
{
    reg_write(REG_UBUF_ROWS, 0);
    reg_write(REG_UBUF_BASE, base);
    reg_write(REG_UBUF_ROWS, rows);
    return reg_read(REG_UBUF_BASE) == base && reg_read(REG_UBUF_ROWS) == rows;
}

/* Write a chip step's configuration into the chip's next registers and read it
 * back; return 0, or the FW_STEP_PROBLEM that refuses it. */
static uint32_t configure(const volatile struct fw_step *step)
{
    reg_write(REG_PROG_ADDR, step->prog_addr);
    reg_write(REG_PROG_LEN, step->prog_len);
    reg_write(REG_PROG_FETCH, 0);
    if (reg_read(REG_PROG_ADDR) != step->prog_addr || reg_read(REG_PROG_LEN) != step->prog_len
        || reg_read(REG_PROG_FETCH) != 0)
        return FW_STEP_PROBLEM_PROGRAM_REFUSED;
    if (!set_ubuf(step->ubuf_base, step->ubuf_rows))
        return FW_STEP_PROBLEM_UBUF_REFUSED;
    return 0;
}

/* Start a configured chip step, stamping its START with the core's cycle counter. */
static void start(volatile struct fw_step *step)
{
    step->t_start = rdcycle();
    reg_write(REG_CTRL, CTRL_START);
}

/* Chip step `index` runs: configure the next one meanwhile (with the overlap), wait
 * for the run to stop, and start the next at once when it is configured (its START
 * clears the interrupt; the bookkeeping follows), else acknowledge the interrupt.
 * Return FW_RESULT_OK to go on, else the result that stopped the table (its details
 * in the mailbox); `*next_started`: step index + 1 runs. */
static uint32_t finish_chip_step(uint32_t index, volatile struct fw_step *step, int overlap,
                                 int *next_started)
{
    uint32_t status, ahead = 0;
    volatile struct fw_step *next = step + 1;
    int configured = 0;

    *next_started = 0;
    if (overlap && index + 1 < fw_mailbox.n_steps && next->kind == FW_STEP_CHIP) {
        ahead = configure(next);            /* while step `index` runs */
        configured = ahead == 0;
    }
    status = wait_stopped();
    if (status & STATUS_ERROR) {
        uint32_t code = reg_read(REG_ERROR);

        fw_mailbox.fault_pc = reg_read(REG_FAULT_PC);
        fw_mailbox.fault_cycle = reg_read(REG_FAULT_CYCLE);
        reg_write(REG_CTRL, CTRL_IRQ_ACK);
        stop_at(index, FW_RESULT_CHIP_FAULT, code);
        return FW_RESULT_CHIP_FAULT;
    }
    step->t_cycles = reg_read(REG_CYCLES);      /* before a START clears it */
    if (configured) {
        start(next);
        *next_started = 1;
    } else {
        reg_write(REG_CTRL, CTRL_IRQ_ACK);
    }
    fw_mailbox.cycles += step->t_cycles;
    if (ahead) {            /* the next step's configuration was refused */
        fw_mailbox.steps_done = index + 1;
        stop_at(index + 1, FW_RESULT_BAD_STEP, ahead);
        return FW_RESULT_BAD_STEP;
    }
    return FW_RESULT_OK;
}

int main(void)
{
    uint32_t n = fw_mailbox.n_steps;
    int overlap = (fw_mailbox.flags & FW_FLAG_OVERLAP) != 0, running = 0;

    fw_mailbox.steps_done = 0;
    fw_mailbox.cycles = 0;
    if (fw_mailbox.magic != FW_MAGIC || n > FW_MAX_STEPS) {
        stop_at(0, FW_RESULT_BAD_TABLE, 0);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        volatile struct fw_step *step = &fw_mailbox.steps[i];
        uint32_t result;

        switch (step->kind) {
        case FW_STEP_CHIP:
            if (!running) {     /* else the step before started it */
                uint32_t problem = configure(step);

                if (problem) {
                    stop_at(i, FW_RESULT_BAD_STEP, problem);
                    return 0;
                }
                start(step);
            }
            result = finish_chip_step(i, step, overlap, &running);
            break;
        case FW_STEP_KERNEL: {
            uint32_t problem;

            step->t_start = rdcycle();
            problem = run_kernel(step->kernel, step->arg0, fw_mailbox.dram_bytes);
            step->t_cycles = rdcycle() - step->t_start;

            if (problem) {
                stop_at(i, FW_RESULT_BAD_STEP, problem);
                return 0;
            }
            result = FW_RESULT_OK;
            break;
        }
        default:
            stop_at(i, FW_RESULT_BAD_STEP, FW_STEP_PROBLEM_UNKNOWN_KIND);
            return 0;
        }
        if (result != FW_RESULT_OK)
            return 0;
        fw_mailbox.steps_done = i + 1;
    }
    finish(FW_RESULT_OK);
    return 0;
}

/* Only the trap interrupts (ebreak, ecall, an illegal instruction, a misaligned
 * access) are unmasked: record where the core stopped and sleep for good, since
 * returning would run the faulting instruction again. */
void fw_irq(uint32_t *frame, uint32_t pending, uint32_t return_pc)
{
    (void)frame;
    fw_mailbox.fault_pc = return_pc;
    stop_at(fw_mailbox.steps_done, FW_RESULT_TRAP, pending);
    for (;;)
        waitirq();
}
