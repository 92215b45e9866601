//go:build !amd64

package store

import "hash/crc32"

// checksum is the CRC a record's header must carry: the CRC32C of all but
// the CRC.
func checksum(rec []byte) uint32 { return crc32.Update(0, castagnoliTable(), rec[4:]) }
