//go:build linux

package server

import "testing"

func TestAllowPeer_Decision(t *testing.T) {
	for _, tc := range []struct {
		peer, self uint32
		want       bool
	}{
		{0, 0, true}, {1000, 1000, true}, {0, 1000, true},
		{1000, 0, false}, {1001, 1000, false}, {65534, 1000, false},
	} {
		if got := allowPeer(tc.peer, tc.self); got != tc.want {
			t.Errorf("allowPeer(peer %d, self %d) = %v, want %v", tc.peer, tc.self, got, tc.want)
		}
	}
}
