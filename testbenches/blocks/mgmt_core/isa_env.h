/* The test environment of PicoRV32's instruction tests (pythondata-cpu-picorv32,
 * verilog/tests/*.S) on the management core's memory map. Included before each test
 * (-include), it stands in for the package's riscv_test.h, whose include guard it
 * defines: the convention is the package's (each test prints its name and "..", then
 * "OK\n" and jumps to <name>_ret, or "ERROR", the failing test number and "\n" and
 * stops on ebreak), but the console is word 31 of the register window
 * instead of the address 0x1000_0000, which is the data memory here. The tests' .text
 * (code and the name string) goes to the instruction memory, their .data to the data
 * memory. Adapted from the package's verilog/tests/riscv_test.h (PicoRV32, ISC
 * licence: verilog/COPYING of the package). */
#ifndef _ENV_PICORV32_TEST_H
#define _ENV_PICORV32_TEST_H

#define CONSOLE_HI 0x40000
#define CONSOLE_LO 124	/* word 31 */

#define RVTEST_RV32U
#define TESTNUM x28

#define RVTEST_CODE_BEGIN		\
	.text;				\
	.global TEST_FUNC_NAME;		\
	.global TEST_FUNC_RET;		\
TEST_FUNC_NAME:				\
	lui	a0,%hi(.test_name);	\
	addi	a0,a0,%lo(.test_name);	\
	lui	a2,CONSOLE_HI;		\
.prname_next:				\
	lb	a1,0(a0);		\
	beq	a1,zero,.prname_done;	\
	sw	a1,CONSOLE_LO(a2);	\
	addi	a0,a0,1;		\
	jal	zero,.prname_next;	\
.test_name:				\
	.ascii TEST_FUNC_TXT;		\
	.byte 0x00;			\
	.balign 4, 0;			\
.prname_done:				\
	addi	a1,zero,'.';		\
	sw	a1,CONSOLE_LO(a2);	\
	sw	a1,CONSOLE_LO(a2);

#define RVTEST_PASS			\
	lui	a0,CONSOLE_HI;		\
	addi	a1,zero,'O';		\
	addi	a2,zero,'K';		\
	addi	a3,zero,'\n';		\
	sw	a1,CONSOLE_LO(a0);	\
	sw	a2,CONSOLE_LO(a0);	\
	sw	a3,CONSOLE_LO(a0);	\
	jal	zero,TEST_FUNC_RET;

#define RVTEST_FAIL			\
	lui	a0,CONSOLE_HI;		\
	addi	a1,zero,'E';		\
	addi	a2,zero,'R';		\
	addi	a3,zero,'O';		\
	addi	a4,zero,'\n';		\
	sw	a1,CONSOLE_LO(a0);	\
	sw	a2,CONSOLE_LO(a0);	\
	sw	a2,CONSOLE_LO(a0);	\
	sw	a3,CONSOLE_LO(a0);	\
	sw	a2,CONSOLE_LO(a0);	\
	sw	TESTNUM,CONSOLE_LO(a0);	\
	sw	a4,CONSOLE_LO(a0);	\
	ebreak;

#define RVTEST_CODE_END
#define RVTEST_DATA_BEGIN .balign 4;
#define RVTEST_DATA_END

#endif
