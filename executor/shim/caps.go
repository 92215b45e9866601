//go:build linux

package shim

import "github.com/moby/sys/capability"

// capsFromMask is the inverse of capMask.
func CapsFromMask(m uint64) []capability.Cap {
	var out []capability.Cap
	for i := range 64 {
		if m&(1<<uint(i)) != 0 {
			out = append(out, capability.Cap(i))
		}
	}
	return out
}
