//go:build linux

package server

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/tether-fsm/tether/executor/shim"
)

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

// TestJoinConfig_EnvNotInArguments: the join shim's configuration, which
// travels as an argument (anyone's to read in /proc/PID/cmdline), does not
// hold the command's environment, which travels as the shim's own.
func TestJoinConfig_EnvNotInArguments(t *testing.T) {
	b, err := json.Marshal(shim.JoinConfig{Env: []string{"DB_PASSWORD=hunter2"}})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte("hunter2")) {
		t.Errorf("the join shim's argument holds the environment: %s", b)
	}
}
