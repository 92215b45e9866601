// Package crc32c is the replay floor's checksum: CRC32C (Castagnoli) of a
// short value summed with SSE 4.2's CRC32 instruction directly, without
// hash/crc32's dispatch (which costs more than the sum of the dozen bytes
// of a typical record). It agrees with hash/crc32's Castagnoli checksum.
package crc32c

import (
	"hash/crc32"

	"golang.org/x/sys/cpu"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum returns the CRC32C of p.
func Sum(p []byte) uint32 {
	if cpu.X86.HasSSE42 {
		return sse42(p)
	}
	return crc32.Checksum(p, castagnoli)
}
