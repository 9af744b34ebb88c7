/* The interrupt test of the management core: unmask the interrupts, say so on the
 * register window, count; the testbench raises interrupt 0 meanwhile and holds it until
 * the handler writes its acknowledgement (the pending mask PicoRV32 hands it in q1).
 * Back from the handler the count finishes and the program says so.
 * Window words: 30 the program's messages, 29 the handler's. */
#include "custom_ops.S"

#define WINDOW 0x40000000
#define MSG 120		/* word 30: the program's messages */
#define HANDLER 116	/* word 29: the handler's */
#define ARMED 0x1111
#define FINISHED 0x2222
#define COUNT 300

	.section .text.start, "ax"
	.global _start
_start:
	j	start

	.balign 16
irq_vec:	/* PROGADDR_IRQ: q0 holds the return address, q1 the pending interrupts */
	picorv32_setq_insn(q2, t0)
	picorv32_setq_insn(q3, t1)
	picorv32_getq_insn(t0, q1)
	li	t1, WINDOW
	sw	t0, HANDLER(t1)
	picorv32_getq_insn(t0, q2)
	picorv32_getq_insn(t1, q3)
	picorv32_retirq_insn()

start:
	li	s1, WINDOW
	li	s0, 0
	li	s2, COUNT
	picorv32_maskirq_insn(zero, zero)
	li	t0, ARMED
	sw	t0, MSG(s1)
1:	addi	s0, s0, 1
	blt	s0, s2, 1b
	sw	s0, MSG(s1)
	li	t0, FINISHED
	sw	t0, MSG(s1)
2:	j	2b
