package crc32c

import (
	"hash/crc32"
	"testing"
)

func TestSum_AgreesWithHashCRC32(t *testing.T) {
	p := make([]byte, 300)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	for n := 0; n <= len(p); n++ {
		if got, want := Sum(p[:n]), crc32.Checksum(p[:n], castagnoli); got != want {
			t.Fatalf("Sum of %d bytes = %#x, want %#x", n, got, want)
		}
	}
}

var sink uint32

func BenchmarkSum17(b *testing.B) {
	p := make([]byte, 17)
	for i := 0; i < b.N; i++ {
		sink += Sum(p)
	}
}
