package crc32c

//go:noescape
func sse42(p []byte) uint32
