/* Accesses outside the management core's map: a store to the instruction memory (no
 * effect) and a load from an unmapped address (reads 0) both complete, and the block
 * flags them on bad_access. The program reports the word it reads back at address 0
 * (its own first instruction) and the unmapped load's value on window word 30, then
 * FINISHED. */
#define WINDOW 0x40000000
#define MSG 120		/* word 30 */
#define FINISHED 0x2222

	.section .text.start, "ax"
	.global _start
_start:
	j	start
start:
	li	s1, WINDOW
	li	t0, 0x12345678
	sw	t0, 0(zero)
	lw	t1, 0(zero)
	sw	t1, MSG(s1)
	li	t2, 0x20000000
	lw	t3, 0(t2)
	sw	t3, MSG(s1)
	li	t0, FINISHED
	sw	t0, MSG(s1)
1:	j	1b
