#include "textflag.h"

// func sse42(p []byte) uint32
TEXT ·sse42(SB), NOSPLIT, $0-28
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	MOVL $0xffffffff, AX

words:
	CMPQ CX, $8
	JB   bytes
	CRC32Q (SI), AX
	ADDQ $8, SI
	SUBQ $8, CX
	JMP  words

bytes:
	TESTQ CX, CX
	JZ    done
	CRC32B (SI), AX
	INCQ  SI
	DECQ  CX
	JMP   bytes

done:
	NOTL AX
	MOVL AX, ret+24(FP)
	RET
