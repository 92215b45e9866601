//go:build linux

package seccomp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

const helperCensus = "seccomp-census"

// censusErrno replaces EPERM as both filters' refusal in the census, so
// that a refusal by the filter is told from the kernel's own EPERM (a
// missing capability). No probe makes the kernel return it.
const censusErrno = unix.EHWPOISON

const censusDoc = "../docs/seccomp.md"

// TestCensus runs the census probe (internal/census) as root with
// Docker's default capability set: without a filter, under tether's
// default filter installed by a helper that then execs the probe, and,
// where runc is installed, under `runc run` with Docker's default profile
// in config.json. It checks that every live verdict under tether's filter
// is the one the BPF VM gives for the same arguments, and that what
// tether allows, runc allows too, over the syscalls Debian's libseccomp
// knows. With -update it writes the table into docs/seccomp.md.
func TestCensus(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the census compares x86_64 tables; this is %s", runtime.GOARCH)
	}
	if err := CheckHost(); err != nil {
		t.Skipf("this kernel has no seccomp filter: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the census runs as root with Docker's capability set, so that missing capabilities do not hide the filter")
	}
	probe := buildCensus(t)
	base := parseCensus(t, runCensusHelper(t, "none", probe))
	teth := parseCensus(t, runCensusHelper(t, "tether", probe))

	f, err := Compile(Default(), Options{Caps: dockerCaps, refuseErrno: censusErrno})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range censusKeys(teth) {
		l := teth[k]
		if l.nr < 0 {
			continue
		}
		r, err := f.Evaluate(systab.X86_64.Audit, uint32(l.nr), l.args...)
		if err != nil {
			t.Fatal(err)
		}
		vm := r.Action.allows()
		if live := !refusedBy(l, base[k]); live != vm {
			t.Errorf("%s: the kernel ran it under the filter: %s (%s); the VM says %v", k, l.result, l.verdict, r)
		}
	}
	for _, k := range []string{"mount", "unshare", "keyctl", "bpf", "clone(CLONE_NEWUSER)", "mknodat(S_IFCHR)", "socket(AF_VSOCK)", "personality(ADDR_NO_RANDOMIZE)"} {
		if !refusedBy(teth[k], base[k]) {
			t.Errorf("%s was not refused under tether's filter: %+v", k, teth[k])
		}
	}
	for _, k := range []string{"read", "clone", "fork", "socket(AF_UNIX)", "mknodat(S_IFIFO)", "personality"} {
		if refusedBy(teth[k], base[k]) {
			t.Errorf("%s was refused under tether's filter: %+v", k, teth[k])
		}
	}
	if teth["clone3"].result != "ENOSYS" {
		t.Errorf("clone3 under tether's filter: %s, want ENOSYS", teth["clone3"].result)
	}

	// The same census inside real exec tasks: `tether run` of a root task
	// with Docker's capability set, under the filter a real launch
	// installs (EPERM as its refusal), and with seccomp = "unconfined"
	// (the operator allowing it) for the kernel's own answers in the same
	// sandbox. The task's refusals are the calls whose answer the filter
	// changed to EPERM or ENOSYS; they are the helper's, call for call.
	// Where the kernel says EPERM in the sandbox already, the two read
	// the same: the task's must be EPERM too.
	var task, taskBase map[string]censusLine
	if tether := buildTether(t); tether != "" {
		task, taskBase = runCensusTask(t, tether, probe, "default"), runCensusTask(t, tether, probe, "unconfined")
	}
	if task != nil {
		for _, k := range censusKeys(teth) {
			h, l, lb := teth[k], task[k], taskBase[k]
			if h.nr < 0 {
				continue
			}
			want := h.result
			if h.result == unix.ErrnoName(censusErrno) {
				want = "EPERM"
			}
			hr, lr := refusedBy(h, base[k]), refusedIn(l, lb)
			switch {
			case lb.result == "EPERM":
				if l.result != "EPERM" {
					t.Errorf("%s: in a real exec task %s, unconfined EPERM", k, l.result)
				}
			case hr != lr || hr && l.result != want:
				t.Errorf("%s: in a real exec task %s (unconfined %s: refused %v), under the helper's filter %s (refused %v)", k, l.result, lb.result, lr, h.result, hr)
			}
		}
	}

	t.Run("runc", func(t *testing.T) {
		runc, err := exec.LookPath("runc")
		if err != nil {
			t.Skip("runc is not installed (Debian's runc package)")
		}
		resolver, err := exec.LookPath("scmp_sys_resolver")
		if err != nil {
			t.Skip("scmp_sys_resolver is not installed (Debian's seccomp package): it says which syscalls libseccomp knows")
		}
		rc := parseCensus(t, runRunc(t, runc, probe))
		known := libseccompKnows(t, resolver)
		var newer []string
		for _, k := range censusKeys(teth) {
			name := strings.SplitN(k, "(", 2)[0]
			if teth[k].nr < 0 {
				continue
			}
			if !known[name] {
				newer = append(newer, k)
				continue
			}
			r, ok := rc[k]
			if !ok {
				t.Errorf("%s: not in runc's census", k)
				continue
			}
			if !refusedBy(teth[k], base[k]) && refusedBy(r, base[k]) {
				t.Errorf("%s: tether allows it (%s), runc refuses it (%s)", k, teth[k].result, r.result)
			}
			if l, ok := task[k]; ok && taskBase[k].result != "EPERM" && !refusedIn(l, taskBase[k]) && refusedBy(r, base[k]) {
				t.Errorf("%s: a real exec task is allowed it (%s), runc refuses it (%s)", k, l.result, r.result)
			}
		}
		t.Logf("%d syscalls libseccomp 2.5.4 does not know: %s", len(newer), strings.Join(newer, " "))
		if *update {
			writeCensusDoc(t, base, teth, task, taskBase, rc, known)
		}
	})
}

func buildCensus(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "census")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./internal/census")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the census: %v\n%s", err, b)
	}
	return out
}

// runCensusTask runs the probe as a real exec task: `tether run` (built
// from ../cmd/tether) of a task file whose user is root, with cap_drop =
// ["all"] and cap_add = Docker's capability set (the operator allowing
// every capability, and the seccomp choice), the probe bound into its
// root at /census. nil, with the reason logged, where exec tasks cannot
// run.
func runCensusTask(t *testing.T, tether, probe, choice string) map[string]censusLine {
	t.Helper()
	dir := t.TempDir()
	probeDir := filepath.Join(dir, "census")
	if err := os.MkdirAll(probeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(probeDir, "census"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, c := range dockerCaps {
		caps = append(caps, strconv.Quote(c.String()))
	}
	file := filepath.Join(dir, "census.hcl")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(`task "census" {
  driver = "exec"
  user   = "root"
  config {
    command  = "/census/census"
    cap_drop = ["all"]
    cap_add  = [%s]
    seccomp  = %q
  }
}
`, strings.Join(caps, ", "), choice)), 0o644); err != nil {
		t.Fatal(err)
	}
	var chroot []string
	for _, d := range []string{"/bin", "/etc", "/lib", "/lib64", "/sbin", "/usr"} {
		if _, err := os.Lstat(d); err == nil {
			chroot = append(chroot, d)
		}
	}
	chroot = append(chroot, probeDir+":/census")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(tether, "--state-dir", state, "--allow-caps", "all", "--allow-seccomp", "unconfined", "--chroot-env", strings.Join(chroot, ","), "run", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tether run of the census: %v\n%s", err, stderr.Bytes())
	}
	return parseCensus(t, out)
}

// buildTether builds ../cmd/tether (static) for the exec task census; ""
// with the reason logged where exec tasks cannot run (no cgroups).
func buildTether(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		t.Logf("no exec task census: no cgroups here (%v)", err)
		return ""
	}
	tether := filepath.Join(t.TempDir(), "tether")
	build := exec.Command("go", "build", "-o", tether, "../cmd/tether")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build tether: %v\n%s", err, b)
	}
	return tether
}

// refusedIn tells whether the filter of a real exec task (whose refusal
// is EPERM) refused the probe: an EPERM or an ENOSYS that the kernel did
// not give without a filter.
func refusedIn(l, base censusLine) bool {
	return l.result == "EPERM" && base.result != "EPERM" || l.result == "ENOSYS" && base.result != "ENOSYS"
}

// runCensusHelper runs the probe through the helper, in namespaces of its
// own (so that nothing a probe could change reaches the host's mounts,
// hostname, IPC objects or network), with Docker's capabilities, under
// tether's filter ("tether") or none ("none").
func runCensusHelper(t *testing.T, mode, probe string) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], helperCensus, mode, probe)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWNET | syscall.CLONE_NEWPID}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("census %s: %v\n%s", mode, err, stderr.Bytes())
	}
	return out
}

// runCensus is the helper: Docker's capabilities (root stays root), then
// for "tether" the filter, then exec of the probe.
func runCensus(args []string) int {
	runtime.LockOSThread() // capabilities are per thread, and this one execs
	mode, probe := args[0], args[1]
	c, err := capability.NewPid2(0)
	if err == nil {
		err = c.Load()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Clear(capability.BOUNDS | capability.CAPS | capability.AMBS)
	c.Set(capability.BOUNDING|capability.PERMITTED|capability.EFFECTIVE|capability.INHERITABLE, dockerCaps...)
	if err := c.Apply(capability.BOUNDS | capability.CAPS); err != nil {
		fmt.Fprintln(os.Stderr, "set capabilities:", err)
		return 1
	}
	if mode == "tether" {
		f, err := Compile(Default(), Options{Caps: dockerCaps, refuseErrno: censusErrno})
		if err == nil {
			err = f.Install()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	err = syscall.Exec(probe, []string{probe, "-errno", strconv.Itoa(int(censusErrno))}, []string{"PATH=/"})
	fmt.Fprintln(os.Stderr, "exec the census:", err)
	return 1
}

// runRunc runs the probe in a runc container: root, Docker's default
// capabilities, Docker's default profile as Docker builds it for them
// (github.com/moby/profiles/seccomp), the refusal's errno replaced by
// censusErrno.
func runRunc(t *testing.T, runc, probe string) []byte {
	t.Helper()
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "bundle", "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "census"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	var caps []string
	for _, c := range dockerCaps {
		caps = append(caps, capName(c))
	}
	spec := &specs.Spec{
		Version: "1.0.2",
		Root:    &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			Args: []string{"/census", "-errno", strconv.Itoa(int(censusErrno))},
			Env:  []string{"PATH=/"},
			Cwd:  "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding: caps, Effective: caps, Permitted: caps,
			},
		},
		Hostname: "census",
		Mounts:   []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
	sc, err := mobyseccomp.GetDefaultProfile(spec)
	if err != nil {
		t.Fatal(err)
	}
	e := uint(censusErrno)
	sc.DefaultErrnoRet = &e
	spec.Linux.Seccomp = sc
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bundle", "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("tether-census-%d", os.Getpid())
	cmd := exec.Command(runc, "--root", filepath.Join(dir, "state"), "run", "--bundle", filepath.Join(dir, "bundle"), id)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("runc run: %v\n%s", err, stderr.Bytes())
	}
	return out
}

// censusLine is one probe's line.
type censusLine struct {
	nr      int // -1: not probed
	args    []uint64
	result  string
	verdict string
}

func parseCensus(t *testing.T, out []byte) map[string]censusLine {
	t.Helper()
	m := map[string]censusLine{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 5 {
			t.Fatalf("census line %q", l)
		}
		c := censusLine{nr: -1, result: f[3], verdict: f[4]}
		if f[1] != "-" {
			nr, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("census line %q: %v", l, err)
			}
			c.nr = nr
		}
		if f[2] != "-" {
			for _, a := range strings.Split(f[2], ",") {
				v, err := strconv.ParseUint(a, 0, 64)
				if err != nil {
					t.Fatalf("census line %q: %v", l, err)
				}
				c.args = append(c.args, v)
			}
		}
		m[f[0]] = c
	}
	if len(m) < 300 {
		t.Fatalf("the census printed %d lines", len(m))
	}
	return m
}

// refusedBy tells whether the filter refused the probe: the census errno,
// or an ENOSYS the kernel did not give without a filter.
func refusedBy(l, base censusLine) bool {
	return l.verdict == "EPERM" || (l.result == "ENOSYS" && base.result != "ENOSYS")
}

func censusKeys(m map[string]censusLine) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]].nr != m[keys[j]].nr {
			return m[keys[i]].nr < m[keys[j]].nr
		}
		return keys[i] < keys[j]
	})
	return keys
}

// libseccompKnows asks libseccomp's resolver which x86_64 names it knows.
func libseccompKnows(t *testing.T, resolver string) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, s := range systab.X86_64.Table {
		out, err := exec.Command(resolver, "-a", "x86_64", s.Name).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", resolver, s.Name, err)
		}
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n >= 0 {
			known[s.Name] = true
		}
	}
	return known
}

func word(l, base censusLine) string {
	switch {
	case l.nr < 0:
		return "not probed"
	case l.verdict == "EPERM":
		return "**EPERM**"
	case refusedBy(l, base):
		return "**ENOSYS**"
	case l.result == "ENOSYS":
		return "ENOSYS, as without a filter"
	}
	return "allowed (" + l.result + ")"
}

// wordIn is word for a real exec task's line (its refusal is EPERM),
// against the unconfined task's (base).
func wordIn(l, base censusLine) string {
	switch {
	case l.nr < 0:
		return "not probed"
	case l.result == "EPERM" && base.result == "EPERM":
		return "EPERM (unconfined too)"
	case refusedIn(l, base):
		return "**" + l.result + "**"
	case l.result == "ENOSYS":
		return "ENOSYS, as without a filter"
	}
	return "allowed (" + l.result + ")"
}

// writeCensusDoc writes the table between the markers of docs/seccomp.md.
func writeCensusDoc(t *testing.T, base, teth, task, taskBase, rc map[string]censusLine, known map[string]bool) {
	t.Helper()
	doc, err := os.ReadFile(censusDoc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- census:begin -->", "<!-- census:end -->"
	i, j := bytes.Index(doc, []byte(begin)), bytes.Index(doc, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s has no %s ... %s markers", censusDoc, begin, end)
	}
	var uname unix.Utsname
	_ = unix.Uname(&uname)
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nKernel %s, x86_64; runc %s. Cells: what the syscall returned with the probe's arguments; **EPERM**/**ENOSYS** is the filter's refusal.\n\n",
		begin, unix.ByteSliceToString(uname.Release[:]), runcVersion())
	table := func(title string, keep func(name string) bool) {
		fmt.Fprintf(&b, "%s\n\n| syscall | nr | no filter | runc, Docker's default | tether's default | a real tether exec task |\n|---|---|---|---|---|---|\n", title)
		counts := [3]int{}
		for _, k := range censusKeys(teth) {
			name := strings.SplitN(k, "(", 2)[0]
			if !keep(name) {
				continue
			}
			l := teth[k]
			nr := "-"
			if l.nr >= 0 {
				nr = strconv.Itoa(l.nr)
			}
			baseWord := "not probed"
			if l.nr >= 0 {
				baseWord = base[k].result
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", k, nr, baseWord, word(rc[k], base[k]), word(l, base[k]), wordIn(task[k], taskBase[k]))
			// An ENOSYS the kernel gives without a filter too says
			// nothing of the filter: not counted.
			for i, c := range []censusLine{l, rc[k]} {
				if l.nr >= 0 && !refusedBy(c, base[k]) && c.result != "ENOSYS" {
					counts[i]++
				}
			}
			if c := task[k]; l.nr >= 0 && !refusedIn(c, taskBase[k]) && c.result != "ENOSYS" && !(c.result == "EPERM" && refusedBy(l, base[k])) {
				counts[2]++
			}
		}
		fmt.Fprintf(&b, "\nAllowed: tether %d (%d in a real exec task), runc %d.\n\n", counts[0], counts[2], counts[1])
	}
	table("### Syscalls libseccomp 2.5.4 knows", func(n string) bool { return known[n] })
	table("### Syscalls newer than libseccomp 2.5.4 (runc cannot name them; its filter refuses them with ENOSYS or EPERM)", func(n string) bool { return !known[n] })
	out := append([]byte{}, doc[:i]...)
	out = append(out, b.String()...)
	out = append(out, doc[j:]...)
	if err := os.WriteFile(censusDoc, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

func runcVersion() string {
	out, err := exec.Command("runc", "--version").Output()
	if err != nil {
		return "?"
	}
	return strings.Fields(string(out))[2]
}
