package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// CheckTrust, the executor's own check of the operator's word (defence
// in depth behind package job's): a driver outside AllowDrivers (nil:
// both), and an exec task's pid_mode or ipc_mode = "host" outside
// AllowHostNamespaces (nil: none), are refused naming the flag.
func TestCheckTrust_DriversAndHostNamespaces(t *testing.T) {
	launch := func(driver, pid, ipc string, drivers, ns []string) wire.Launch {
		return wire.Launch{Spec: fsm.Spec{Driver: driver, Command: "/bin/true", PIDMode: pid, IPCMode: ipc},
			Policy: wire.Policy{AllowDrivers: drivers, AllowHostNamespaces: ns}}
	}
	for _, tc := range []struct {
		what string
		l    wire.Launch
		flag string // "": allowed
	}{
		{"raw_exec, no list", launch(wire.ModeRawExec, "", "", nil, nil), ""},
		{"raw_exec, exec alone", launch(wire.ModeRawExec, "", "", []string{wire.ModeExec}, nil), "--allow-drivers"},
		{"exec, raw_exec alone", launch(wire.ModeExec, "", "", []string{wire.ModeRawExec}, nil), "--allow-drivers"},
		{"exec, both", launch(wire.ModeExec, "", "", []string{wire.ModeExec, wire.ModeRawExec}, nil), ""},
		{"pid host, none", launch(wire.ModeExec, wire.ModeHost, "", nil, nil), "--allow-host-namespaces pid"},
		{"pid host, ipc", launch(wire.ModeExec, wire.ModeHost, "", nil, []string{"ipc"}), "--allow-host-namespaces pid"},
		{"pid host, pid", launch(wire.ModeExec, wire.ModeHost, "", nil, []string{"pid"}), ""},
		{"ipc host, none", launch(wire.ModeExec, "", wire.ModeHost, nil, nil), "--allow-host-namespaces ipc"},
		{"ipc host, pid", launch(wire.ModeExec, "", wire.ModeHost, nil, []string{"pid"}), "--allow-host-namespaces ipc"},
		{"both host, both", launch(wire.ModeExec, wire.ModeHost, wire.ModeHost, nil, []string{"pid", "ipc"}), ""},
	} {
		err := CheckTrust(tc.l)
		switch {
		case tc.flag == "" && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.flag != "" && (!errors.Is(err, wire.ErrBadSpec) || !strings.Contains(err.Error(), tc.flag)):
			t.Errorf("%s: %v, want a refusal naming %s", tc.what, err, tc.flag)
		}
	}
	if err := ValidateTrust([]string{"docker"}, nil); err == nil {
		t.Error("ValidateTrust: driver docker accepted")
	}
	if err := ValidateTrust(nil, []string{"net"}); err == nil {
		t.Error("ValidateTrust: namespace net accepted")
	}
}
