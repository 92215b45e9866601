package store

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

// crc32cSSE42 is the CRC32C of p, summed with SSE 4.2's CRC32 instruction
// (crc_amd64.s).
//
//go:noescape
func crc32cSSE42(p []byte) uint32

var haveSSE42 = cpu.X86.HasSSE42

// shortCRC bounds the inputs crc32cSSE42 sums: past it, hash/crc32's
// three-way interleaved loop is faster.
const shortCRC = 256

// checksum is the CRC a record's header must carry: the CRC32C of all but
// the CRC. Records are short, and replay sums one per event: hash/crc32's
// dispatch (an atomic load, a table compare, an indirect call) costs more
// than the sum of a dozen bytes, so short ones are summed directly.
func checksum(rec []byte) uint32 {
	if b := rec[4:]; haveSSE42 && len(b) < shortCRC {
		return crc32cSSE42(b)
	}
	return crc32.Update(0, castagnoliTable(), rec[4:])
}
