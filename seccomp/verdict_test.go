package seccomp

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/moby/sys/capability"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

// verdictColumns are the filters the verdict list holds, one column each:
// the default profile for a task with no capability (a non-root task),
// with Docker's default set, and with every capability (where only the
// floor stands between a cap-conditioned rule and the task), that last
// one also sharing the host's PID namespace.
var verdictColumns = []struct {
	name string
	opts Options
}{
	{"none", Options{}},
	{"docker", Options{Caps: dockerCaps}},
	{"all", Options{Caps: allCaps()}},
	{"all+hostpid", Options{Caps: allCaps(), HostPID: true}},
}

const verdictsFile = "testdata/verdicts_x86_64.txt"

// TestFilter_Verdicts evaluates the compiled default filter, in the BPF
// VM, for every syscall number of x86_64, of i386 (int 0x80 on an x86_64
// kernel: the i386 audit value) and of x32 (x86_64's audit value with
// __X32_SYSCALL_BIT), with zero arguments, under each column's options,
// and compares with the checked-in list. A rule lost or gained anywhere,
// for a syscall that needs a capability too, shows as a line of the diff.
// Refresh with `go test ./seccomp -run TestFilter_Verdicts -update`, and
// read the diff.
func TestFilter_Verdicts(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the checked-in verdicts are x86_64's; this is %s", runtime.GOARCH)
	}
	got := verdicts(t)
	if *update {
		if err := os.WriteFile(verdictsFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(verdictsFile)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the compiled filters' verdicts differ from %s (rerun with -update and review the diff):\n%s",
			verdictsFile, lineDiff(string(want), string(got)))
	}
}

func verdicts(t *testing.T) []byte {
	filters := make([]*Filter, len(verdictColumns))
	var b bytes.Buffer
	b.WriteString("# Verdicts of tether's default seccomp filter, evaluated in golang.org/x/net/bpf's VM with zero\n")
	b.WriteString("# arguments. Columns: the task's capabilities (none; Docker's default set; all; all with the\n")
	b.WriteString("# host's PID namespace). Written by `go test ./seccomp -run TestFilter_Verdicts -update`.\n")
	b.WriteString("# arch nr name")
	for i, c := range verdictColumns {
		filters[i] = mustCompile(t, Default(), c.opts)
		b.WriteString(" " + c.name)
	}
	b.WriteString("\n")
	row := func(archName string, audit, nr uint32, names []string) {
		name := "-"
		if len(names) > 0 {
			name = strings.Join(names, ",")
		}
		fmt.Fprintf(&b, "%s %d %s", archName, nr, name)
		for _, f := range filters {
			r, err := f.Evaluate(audit, nr)
			if err != nil {
				t.Fatalf("%s %d: %v", archName, nr, err)
			}
			b.WriteString(" " + verdictWord(r))
		}
		b.WriteString("\n")
	}
	for _, a := range []*systab.Arch{systab.X86_64, systab.I386} {
		nrs := a.Numbers()
		top := nrs[len(nrs)-1] + 8 // and a few numbers no kernel has yet
		for nr := 0; nr <= top; nr++ {
			row(a.Name, a.Audit, uint32(nr), a.Names(nr))
		}
	}
	// x32: x86_64's numbers with the x32 bit, and x32's own (512-547).
	for nr := 0; nr <= 600; nr++ {
		row("x32", systab.X86_64.Audit, uint32(nr)|systab.X86_64.ABIBit, systab.X86_64.Names(nr))
	}
	for _, nr := range []uint32{0x3fffffff, 0x7fffffff, 0xffffffff} {
		row("x86_64", systab.X86_64.Audit, nr, nil)
	}
	return b.Bytes()
}

func verdictWord(r Result) string {
	if r.Action == ActErrno {
		return errnoName(r.Errno)
	}
	return r.Action.String()
}

// lineDiff lists the lines of want missing from got (-) and the lines of
// got missing from want (+), in order.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inW, inG := map[string]bool{}, map[string]bool{}
	for _, l := range w {
		inW[l] = true
	}
	for _, l := range g {
		inG[l] = true
	}
	var b strings.Builder
	for _, l := range w {
		if !inG[l] {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !inW[l] {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

// TestFilter_VerdictsFloor reads the checked-in list itself: whatever
// -update wrote, the floor's syscalls are refused in every column, clone3
// returns ENOSYS, every i386 and x32 number is refused, and the syscalls
// every program needs are allowed. A rewrite that lost the floor fails
// here even if its author accepted the diff.
func TestFilter_VerdictsFloor(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the checked-in verdicts are x86_64's; this is %s", runtime.GOARCH)
	}
	data, err := os.ReadFile(filepath.Clean(verdictsFile))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{} // "x86_64 name" -> verdicts
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 3+len(verdictColumns) {
			t.Fatalf("malformed line %q", l)
		}
		switch f[0] {
		case "i386", "x32":
			for _, v := range f[3:] {
				if v != "EPERM" {
					t.Errorf("%s: %s %s is %s, want EPERM (foreign ABIs are refused)", verdictsFile, f[0], f[1], v)
				}
			}
		case "x86_64":
			for _, n := range strings.Split(f[2], ",") {
				rows[n] = f[3:]
			}
		}
	}
	check := func(name string, want string, cols ...int) {
		v, ok := rows[name]
		if !ok {
			t.Errorf("%s: no x86_64 row for %s", verdictsFile, name)
			return
		}
		for _, c := range cols {
			if v[c] != want {
				t.Errorf("%s: %s with caps %s is %s, want %s", verdictsFile, name, verdictColumns[c].name, v[c], want)
			}
		}
	}
	all := []int{0, 1, 2, 3}
	for _, n := range floorRefused {
		if _, ok := systab.X86_64.Number(n); ok {
			check(n, "EPERM", all...)
		}
	}
	check("clone3", "ENOSYS", all...)
	for _, n := range []string{"read", "write", "openat", "close", "mmap", "futex", "execve", "exit_group", "clone", "socket", "rt_sigreturn"} {
		check(n, "allow", all...)
	}
	for _, n := range traceCalls {
		check(n, "EPERM", 3)
	}
	check("ptrace", "allow", 0, 1, 2)
	for _, n := range []string{"adjtimex", "clock_adjtime"} {
		check(n, "allow", 0, 1)
		check(n, "EPERM", 2, 3)
	}
	_ = capability.CAP_SYS_TIME
}
