/* The management core's DRAM window (0x8000_0000 + b is DRAM byte b) with any DRAM word
 * width: loads of bytes, halves and words of what the testbench wrote, stores of each
 * width merged into their words and read back, the window's last word, and accesses
 * past the DRAM's end (they read 0 and raise bad_access). Each check loads a value and
 * compares it with the expected one; the first that differs reports itself and stops.
 *
 * The testbench fills DRAM bytes [0, 0x100) with (b + 0x80) & 0xff and the last 16
 * bytes with 0x40 + i (and the rest with noise), and reads the DRAM back at the end.
 * Window word 28 is the testbench's choice of run: 0 this program, 1-4 one misaligned
 * access each (a word load, a half load, a word store, a half store), which must trap
 * before it reaches the DRAM.
 *
 * Window word 30 gets the messages: the number of checks passed before the accesses
 * past the end (bad_access must still be low then), the number after them, FINISHED;
 * or the value a check loaded, then FAILED + the check's number; or NOT_TRAPPED. */
#define WINDOW 0x40000000
#define MODE 112	/* word 28 */
#define MSG 120		/* word 30 */
#define DRAM 0x80000000
#define DRAM_BYTES 0x4000
#define FINISHED 0x2222
#define FAILED 0xfa110000
#define NOT_TRAPPED 0x7a7a

/* check n: `insn` loads from off(base), which must give `want` */
#define CHECK(insn, off, base, want) \
	addi gp, gp, 1; insn t0, off(base); li t1, want; bne t0, t1, fail
/* `insn` (sb, sh, sw) stores `value` at off(base) */
#define PUT(insn, value, off, base) \
	li t0, value; insn t0, off(base)

	.section .text.start, "ax"
	.global _start
_start:
	j	start
start:
	li	s1, WINDOW
	li	s2, DRAM
	li	s3, DRAM + DRAM_BYTES - 16	/* the last 16 bytes */
	li	gp, 0
	lw	a0, MODE(s1)
	bnez	a0, misaligned

	/* what the testbench wrote: words across two 16-byte words, bytes, halves */
	CHECK(lw, 0x00, s2, 0x83828180)
	CHECK(lw, 0x04, s2, 0x87868584)
	CHECK(lw, 0x0c, s2, 0x8f8e8d8c)
	CHECK(lw, 0x10, s2, 0x93929190)
	CHECK(lbu, 0x01, s2, 0x81)
	CHECK(lb, 0x01, s2, 0xffffff81)
	CHECK(lb, 0x83, s2, 0x03)
	CHECK(lbu, 0xff, s2, 0x7f)
	CHECK(lh, 0x06, s2, 0xffff8786)
	CHECK(lhu, 0x0e, s2, 0x8f8e)
	CHECK(lh, 0x82, s2, 0x0302)
	CHECK(lw, 0x7c, s2, 0xfffefdfc)
	CHECK(lw, 0x0c, s3, 0x4f4e4d4c)
	CHECK(lbu, 0x0f, s3, 0x4f)
	CHECK(lw, 0x00, s3, 0x43424140)

	/* stores of each width, merged into the bytes 0x40.. (0xc0.. before) */
	PUT(sb, 0xa5, 0x41, s2)
	CHECK(lw, 0x40, s2, 0xc3c2a5c0)
	PUT(sh, 0x1234, 0x46, s2)
	CHECK(lw, 0x44, s2, 0x1234c5c4)
	PUT(sw, 0xdeadbeef, 0x48, s2)
	CHECK(lw, 0x48, s2, 0xdeadbeef)
	PUT(sb, 0x5a, 0x4f, s2)
	CHECK(lw, 0x4c, s2, 0x5acecdcc)
	PUT(sh, 0xbeef, 0x50, s2)
	CHECK(lw, 0x50, s2, 0xd3d2beef)
	CHECK(lw, 0x3c, s2, 0xbfbebdbc)
	CHECK(lw, 0x54, s2, 0xd7d6d5d4)
	CHECK(lb, 0x41, s2, 0xffffffa5)
	CHECK(lhu, 0x46, s2, 0x1234)
	CHECK(lh, 0x50, s2, 0xffffbeef)
	PUT(sb, 0x00, 0x40, s2)
	PUT(sb, 0x11, 0x42, s2)
	PUT(sb, 0x22, 0x43, s2)
	CHECK(lw, 0x40, s2, 0x2211a500)
	PUT(sh, 0x7788, 0x44, s2)
	CHECK(lw, 0x44, s2, 0x12347788)
	/* the last word, which the testbench reads back, and the last 16-byte word's first */
	PUT(sw, 0xcafef00d, 0x0c, s3)
	CHECK(lw, 0x0c, s3, 0xcafef00d)
	PUT(sb, 0x99, 0x00, s3)
	CHECK(lw, 0x00, s3, 0x43424199)
	sw	gp, MSG(s1)

	/* past the end: reads give 0, stores do nothing (the testbench checks the DRAM) */
	CHECK(lw, 0x10, s3, 0)
	PUT(sw, 0x5555aaaa, 0x10, s3)
	CHECK(lbu, 0x13, s3, 0)
	li	s4, 0xfffffff0		/* the window's last bytes */
	CHECK(lw, 0x0c, s4, 0)
	sw	gp, MSG(s1)
	li	t0, FINISHED
	sw	t0, MSG(s1)
1:	j	1b

fail:
	sw	t0, MSG(s1)
	li	t1, FAILED
	or	t1, t1, gp
	sw	t1, MSG(s1)
2:	j	2b

misaligned:	/* PicoRV32 traps on these (interrupts masked) */
	li	t0, 0x55aa55aa
	li	t1, 1
	beq	a0, t1, 1f
	li	t1, 2
	beq	a0, t1, 2f
	li	t1, 3
	beq	a0, t1, 3f
	sh	t0, 0x43(s2)
	j	4f
1:	lw	t0, 0x42(s2)
	j	4f
2:	lh	t0, 0x41(s2)
	j	4f
3:	sw	t0, 0x41(s2)
4:	li	t0, NOT_TRAPPED
	sw	t0, MSG(s1)
5:	j	5b
