//go:build !amd64

package crc32c

import "hash/crc32"

func sse42(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }
