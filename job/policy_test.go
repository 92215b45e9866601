package job

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// policyTask is a file of one task of driver with block in its config.
func policyTask(driver, block string) string {
	return "task \"x\" {\n driver = \"" + driver + "\"\n config {\n command = \"/bin/true\"\n " + block + "\n }\n}"
}

// The drivers a file may use are the operator's: every driver locally by
// default, exec alone for a spec from etcd; each list widens or narrows
// only what it names, and a refusal names the driver and the flag.
func TestPolicy_DriversByTheOperatorsWord(t *testing.T) {
	for _, tc := range []struct {
		what          string
		driver        string
		local, remote []string
		fromEtcd      bool
		refusedNaming string // "": allowed
	}{
		{"raw_exec locally by default", "raw_exec", nil, nil, false, ""},
		{"exec locally by default", "exec", nil, nil, false, ""},
		{"exec from etcd by default", "exec", nil, nil, true, ""},
		{"raw_exec from etcd by default", "raw_exec", nil, nil, true, "--allow-remote-drivers"},
		{"raw_exec from etcd the operator allows", "raw_exec", nil, []string{"exec", "raw_exec"}, true, ""},
		{"raw_exec locally off", "raw_exec", []string{"exec"}, nil, false, "--allow-drivers"},
		{"raw_exec from etcd, locally off", "raw_exec", []string{"exec"}, []string{"exec"}, true, "--allow-remote-drivers"},
		{"exec locally off", "exec", []string{"raw_exec"}, []string{}, false, "--allow-drivers"},
		{"exec from etcd, remote list empty", "exec", nil, []string{}, true, "--allow-remote-drivers"},
		{"a remote list does not narrow a local file", "raw_exec", nil, []string{"exec"}, false, ""},
		{"exec from etcd, --allow-remote-drivers none", "exec", nil, []string{NoDriver}, true, "--allow-remote-drivers"},
		{"raw_exec locally, --allow-remote-drivers none", "raw_exec", nil, []string{NoDriver}, false, ""},
	} {
		node := testNode(t)
		node.Policy.AllowDrivers, node.Policy.AllowRemoteDrivers = tc.local, tc.remote
		if err := node.Policy.Validate(); err != nil {
			t.Fatalf("%s: Validate: %v", tc.what, err)
		}
		if tc.fromEtcd {
			node.Policy = node.Policy.ForRemote()
		}
		src := Source{File: "t.hcl", Text: []byte(policyTask(tc.driver, ""))}
		for _, read := range []struct {
			name string
			f    func() error
		}{
			{"Read", func() error { _, err := Read(src, Inputs{}, node); return err }},
			{"Vet", func() error { _, err := Vet(src, Inputs{}, node.Policy); return err }},
		} {
			err := read.f()
			switch {
			case tc.refusedNaming == "" && err != nil:
				t.Errorf("%s: %s: %v, want it allowed", tc.what, read.name, err)
			case tc.refusedNaming != "" && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tc.refusedNaming) ||
				!strings.Contains(err.Error(), `driver "`+tc.driver+`"`)):
				t.Errorf("%s: %s: %v, want a refusal naming driver %q and %s", tc.what, read.name, err, tc.driver, tc.refusedNaming)
			}
		}
	}
}

// A remote list wider than the local one, an unknown driver or namespace,
// a negative bound: refused by Validate, naming the flag.
func TestPolicy_ValidateNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		p    Policy
		flag string
	}{
		{Policy{AllowDrivers: []string{"docker"}}, "--allow-drivers"},
		{Policy{AllowRemoteDrivers: []string{"docker"}}, "--allow-remote-drivers"},
		{Policy{AllowDrivers: []string{"exec"}, AllowRemoteDrivers: []string{"raw_exec"}}, "--allow-drivers"},
		{Policy{AllowHostNamespaces: []string{"net"}}, "--allow-host-namespaces"},
		{Policy{MaxCount: -1}, "--max-count"},
	} {
		if err := tc.p.Validate(); !errors.Is(err, ErrBadInput) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want a refusal naming %s", tc.p, err, tc.flag)
		}
	}
	for _, p := range []Policy{{}, {AllowDrivers: []string{"exec", "raw_exec"}, AllowRemoteDrivers: []string{"raw_exec"}, AllowHostNamespaces: []string{"pid", "ipc"}, MaxCount: 1}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// pid_mode and ipc_mode = "host" on an exec task need the operator's
// --allow-host-namespaces naming that namespace, from any source; one
// namespace allowed does not allow the other.
func TestPolicy_HostNamespacesByTheOperatorsWord(t *testing.T) {
	for _, tc := range []struct {
		block   string
		allow   []string
		refused string // the attribute the refusal names; "": allowed
	}{
		{`pid_mode = "host"`, nil, "pid_mode"},
		{`ipc_mode = "host"`, nil, "ipc_mode"},
		{`pid_mode = "host"`, []string{"pid"}, ""},
		{`ipc_mode = "host"`, []string{"ipc"}, ""},
		{`pid_mode = "host"`, []string{"ipc"}, "pid_mode"},
		{`ipc_mode = "host"`, []string{"pid"}, "ipc_mode"},
		{"pid_mode = \"host\"\n ipc_mode = \"host\"", []string{"pid", "ipc"}, ""},
		{"pid_mode = \"host\"\n ipc_mode = \"host\"", []string{"pid"}, "ipc_mode"},
		{``, nil, ""},
	} {
		for _, remote := range []bool{false, true} {
			p := Policy{AllowHostNamespaces: tc.allow}
			if remote {
				p = p.ForRemote()
			}
			_, err := Vet(Source{File: "t.hcl", Text: []byte(policyTask("exec", tc.block))}, Inputs{}, p)
			switch {
			case tc.refused == "" && err != nil:
				t.Errorf("%q allowing %v (remote %v): %v", tc.block, tc.allow, remote, err)
			case tc.refused != "" && (!errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "--allow-host-namespaces")):
				t.Errorf("%q allowing %v (remote %v): %v, want a refusal naming %s and --allow-host-namespaces", tc.block, tc.allow, remote, err, tc.refused)
			}
		}
	}
}

// A group's count is bounded by MaxCount (default 1,000): at the bound it
// is read, past it refused naming --max-count, on Read's path and Vet's.
func TestPolicy_MaxCount(t *testing.T) {
	file := func(n string) Source {
		return Source{File: "t.hcl", Text: []byte("job \"j\" {\n group \"g\" {\n count = " + n + "\n task \"x\" {\n driver = \"raw_exec\"\n config { command = \"/bin/true\" }\n }\n }\n}")}
	}
	for _, tc := range []struct {
		max     int
		count   string
		refused bool
	}{
		{3, "3", false}, {3, "4", true}, {0, "1000", false}, {0, "1001", true}, {2000, "1001", false},
	} {
		_, err := Vet(file(tc.count), Inputs{}, Policy{MaxCount: tc.max})
		var pe *ParseError
		switch {
		case tc.refused && (!errors.As(err, &pe) || !strings.Contains(err.Error(), "--max-count")):
			t.Errorf("count %s, --max-count %d: %v, want a refusal naming --max-count", tc.count, tc.max, err)
		case !tc.refused && err != nil:
			t.Errorf("count %s, --max-count %d: %v", tc.count, tc.max, err)
		}
	}
	if _, err := Parse(file("1001"), Inputs{}); err == nil || !strings.Contains(err.Error(), "at most 1000 copies") {
		t.Errorf("Parse: count 1001: %v, want the default bound", err)
	}
}

// The compute bomb of issue 32 (a 230-byte file whose setproduct would
// allocate 24 GiB) is a parse error naming the limit, not an out of memory.
func TestVet_ComputeBombIsAParseErrorNamingTheLimit(t *testing.T) {
	src := Source{File: "bomb.hcl", Text: []byte(policyTask("exec", `args = [format("%d", length(setproduct(range(1024), range(1024), range(1024))))]`))}
	_, err := Vet(src, Inputs{}, Policy{}.ForRemote())
	var pe *ParseError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), "limit") || !strings.Contains(err.Error(), "setproduct") {
		t.Fatalf("Vet: %v, want a *ParseError naming setproduct and the limit", err)
	}
}

// A --driver override is judged as the file's own driver would be: on
// the spec as made (Check, in Instantiate), so that `tether run --driver
// raw_exec` of an exec file is refused where --allow-drivers is exec.
func TestPolicy_DriverOverrideIsJudged(t *testing.T) {
	node := testNode(t)
	node.Policy.AllowDrivers = []string{"exec"}
	j := mustRead(t, policyTask("exec", ""), Inputs{}, node)
	var ids []IDs
	for _, s := range j.Shapes() {
		ids = append(ids, NewIDs(s))
	}
	_, err := j.Instantiate(context.Background(), node, ids, Overrides{Driver: "raw_exec"})
	if !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--allow-drivers") {
		t.Fatalf("--driver raw_exec under --allow-drivers exec: %v, want a refusal naming --allow-drivers", err)
	}
}

// What a node offers the fleet's scheduler is what a spec from etcd may
// use: the remote list within the local one, none for "none".
func TestPolicy_RemoteDriversOffered(t *testing.T) {
	for _, tc := range []struct {
		local, remote, want []string
	}{
		{nil, nil, []string{"exec"}},
		{nil, []string{"exec", "raw_exec"}, []string{"exec", "raw_exec"}},
		{[]string{"exec"}, nil, []string{"exec"}},
		{nil, []string{NoDriver}, []string{}},
		{[]string{"raw_exec"}, nil, []string{}},
	} {
		p := Policy{AllowDrivers: tc.local, AllowRemoteDrivers: tc.remote}
		if got := p.RemoteDrivers(); got == nil || !slices.Equal(got, tc.want) {
			t.Errorf("local %v, remote %v: RemoteDrivers() = %#v, want %v", tc.local, tc.remote, got, tc.want)
		}
	}
	if err := (Policy{AllowRemoteDrivers: []string{NoDriver, "exec"}}).Validate(); err == nil {
		t.Error(`--allow-remote-drivers none,exec validated: "none" stands alone`)
	}
}
