/* Reset and interrupt entry of the management core (PicoRV32, RV32IM).
 *
 * Reset (address 0): the stack pointer from the linker script, .bss cleared, the
 * trap interrupts unmasked (everything else stays masked: the accelerator's
 * interrupt is waited for with `waitirq`, see main.c), then main(); if main returns,
 * the core sleeps for good.
 *
 * Interrupt (address 0x10, PicoRV32's PROGADDR_IRQ): every register but x0 is saved
 * in a frame on the interrupt stack, a region of its own at the top of the data
 * memory (a trap may come from code whose sp is wrong), fw_irq(frame, pending,
 * return_pc) is called, the registers are restored and `retirq` returns. q2 and q3
 * hold ra and sp while the frame is set up.
 *
 * The custom instructions, with `.insn r opcode, funct3, funct7, rd, rs1, rs2`
 * (q registers are named by their number in the x fields):
 *   getq rd, qN   = .insn r 0x0b, 4, 0, rd, xN, x0
 *   setq qN, rs   = .insn r 0x0b, 2, 1, xN, rs, x0
 *   retirq        = .insn r 0x0b, 0, 2, x0, x0, x0
 *   maskirq rd,rs = .insn r 0x0b, 6, 3, rd, rs, x0
 *   waitirq rd    = .insn r 0x0b, 4, 4, rd, x0, x0
 */

#define FRAME_BYTES 128          /* x1..x31 at 4*n, slot 0 unused */
#define TRAP_IRQS   6            /* IRQ_TRAP | IRQ_BUSERROR (picorv32.h) */

    .section .text.vectors, "ax"
    .globl _start
_start:
    j       reset_body
    .balign 16
irq_entry:
    .insn r 0x0b, 2, 1, x2, ra, x0      /* setq q2, ra */
    .insn r 0x0b, 2, 1, x3, sp, x0      /* setq q3, sp */
    la      sp, __irq_stack_top - FRAME_BYTES
    .insn r 0x0b, 4, 0, ra, x2, x0      /* getq ra, q2: the interrupted ra */
    sw      ra,  1*4(sp)
    .insn r 0x0b, 4, 0, ra, x3, x0      /* getq ra, q3: the interrupted sp */
    sw      ra,  2*4(sp)
    sw      x3,  3*4(sp)
    sw      x4,  4*4(sp)
    sw      x5,  5*4(sp)
    sw      x6,  6*4(sp)
    sw      x7,  7*4(sp)
    sw      x8,  8*4(sp)
    sw      x9,  9*4(sp)
    sw      x10, 10*4(sp)
    sw      x11, 11*4(sp)
    sw      x12, 12*4(sp)
    sw      x13, 13*4(sp)
    sw      x14, 14*4(sp)
    sw      x15, 15*4(sp)
    sw      x16, 16*4(sp)
    sw      x17, 17*4(sp)
    sw      x18, 18*4(sp)
    sw      x19, 19*4(sp)
    sw      x20, 20*4(sp)
    sw      x21, 21*4(sp)
    sw      x22, 22*4(sp)
    sw      x23, 23*4(sp)
    sw      x24, 24*4(sp)
    sw      x25, 25*4(sp)
    sw      x26, 26*4(sp)
    sw      x27, 27*4(sp)
    sw      x28, 28*4(sp)
    sw      x29, 29*4(sp)
    sw      x30, 30*4(sp)
    sw      x31, 31*4(sp)

    mv      a0, sp                      /* the frame */
    .insn r 0x0b, 4, 0, a1, x1, x0      /* getq a1, q1: the pending mask */
    .insn r 0x0b, 4, 0, a2, x0, x0      /* getq a2, q0: the return address */
    call    fw_irq

    lw      x3,  3*4(sp)
    lw      x4,  4*4(sp)
    lw      x5,  5*4(sp)
    lw      x6,  6*4(sp)
    lw      x7,  7*4(sp)
    lw      x8,  8*4(sp)
    lw      x9,  9*4(sp)
    lw      x10, 10*4(sp)
    lw      x11, 11*4(sp)
    lw      x12, 12*4(sp)
    lw      x13, 13*4(sp)
    lw      x14, 14*4(sp)
    lw      x15, 15*4(sp)
    lw      x16, 16*4(sp)
    lw      x17, 17*4(sp)
    lw      x18, 18*4(sp)
    lw      x19, 19*4(sp)
    lw      x20, 20*4(sp)
    lw      x21, 21*4(sp)
    lw      x22, 22*4(sp)
    lw      x23, 23*4(sp)
    lw      x24, 24*4(sp)
    lw      x25, 25*4(sp)
    lw      x26, 26*4(sp)
    lw      x27, 27*4(sp)
    lw      x28, 28*4(sp)
    lw      x29, 29*4(sp)
    lw      x30, 30*4(sp)
    lw      x31, 31*4(sp)
    lw      ra,  1*4(sp)
    lw      sp,  2*4(sp)
    .insn r 0x0b, 0, 2, x0, x0, x0      /* retirq */

    .section .text
reset_body:
    la      sp, __stack_top
    la      t0, __bss_start
    la      t1, __bss_end
1:  bgeu    t0, t1, 2f
    sw      zero, 0(t0)
    addi    t0, t0, 4
    j       1b
2:  li      t0, ~TRAP_IRQS
    .insn r 0x0b, 6, 3, x0, t0, x0      /* maskirq zero, t0 */
    call    main
3:  .insn r 0x0b, 4, 4, x0, x0, x0      /* waitirq zero */
    j       3b
