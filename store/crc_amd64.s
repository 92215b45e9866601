#include "textflag.h"

// func crc32cSSE42(p []byte) uint32
//
// The CRC32C of p with SSE 4.2's CRC32 instruction: eight bytes a step,
// then four, two and one. For the short inputs of records (a dozen bytes
// and up), where hash/crc32's dispatch costs more than the sum itself.
TEXT ·crc32cSSE42(SB), NOSPLIT, $0-28
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	MOVL $0xffffffff, AX

words:
	CMPQ CX, $8
	JB   four
	CRC32Q (SI), AX
	ADDQ $8, SI
	SUBQ $8, CX
	JMP  words

four:
	BTQ $2, CX
	JNC two
	CRC32L (SI), AX
	ADDQ $4, SI

two:
	BTQ $1, CX
	JNC one
	CRC32W (SI), AX
	ADDQ $2, SI

one:
	BTQ $0, CX
	JNC done
	CRC32B (SI), AX

done:
	NOTL AX
	MOVL AX, ret+24(FP)
	RET
