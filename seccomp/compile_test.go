package seccomp

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

func skipUnlessAMD64(t *testing.T) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		t.Skipf("the cases use x86_64's syscall numbers; this is %s", runtime.GOARCH)
	}
}

func eval(t *testing.T, f *Filter, name string, args ...uint64) Result {
	t.Helper()
	nr, ok := systab.X86_64.Number(name)
	if !ok {
		t.Fatalf("no x86_64 syscall %s", name)
	}
	r, err := f.Evaluate(unix.AUDIT_ARCH_X86_64, uint32(nr), args...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var (
	allow  = Result{Action: ActAllow}
	eperm  = Result{Action: ActErrno, Errno: syscall.EPERM}
	enosys = Result{Action: ActErrno, Errno: syscall.ENOSYS}
)

// TestFilter_ArgumentConditions checks the argument-conditioned rules one
// by one, for a task without capabilities, with Docker's and with all
// (the floor's conditions hold whatever the capabilities).
func TestFilter_ArgumentConditions(t *testing.T) {
	skipUnlessAMD64(t)
	const (
		goThread    = unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD
		glibcThread = goThread | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID
		forkFlags   = unix.CLONE_CHILD_SETTID | unix.CLONE_CHILD_CLEARTID | uint64(unix.SIGCHLD)
		high        = uint64(1) << 32
	)
	cases := []struct {
		name    string
		syscall string
		args    []uint64
		want    Result
	}{
		{"clone: a Go thread", "clone", []uint64{goThread}, allow},
		{"clone: a glibc thread", "clone", []uint64{glibcThread}, allow},
		{"clone: fork", "clone", []uint64{forkFlags}, allow},
		{"clone: vfork", "clone", []uint64{unix.CLONE_VM | unix.CLONE_VFORK | uint64(unix.SIGCHLD)}, allow},
		{"clone: CLONE_NEWUSER", "clone", []uint64{unix.CLONE_NEWUSER | uint64(unix.SIGCHLD)}, eperm},
		{"clone: CLONE_NEWNS", "clone", []uint64{unix.CLONE_NEWNS}, eperm},
		{"clone: CLONE_NEWPID", "clone", []uint64{unix.CLONE_NEWPID}, eperm},
		{"clone: CLONE_NEWNET", "clone", []uint64{unix.CLONE_NEWNET}, eperm},
		{"clone: CLONE_NEWUTS", "clone", []uint64{unix.CLONE_NEWUTS}, eperm},
		{"clone: CLONE_NEWIPC", "clone", []uint64{unix.CLONE_NEWIPC}, eperm},
		{"clone: CLONE_NEWCGROUP", "clone", []uint64{unix.CLONE_NEWCGROUP}, eperm},
		{"clone: thread flags and CLONE_NEWUSER", "clone", []uint64{glibcThread | unix.CLONE_NEWUSER}, eperm},
		{"clone: namespace flag with high bits set", "clone", []uint64{high | unix.CLONE_NEWUSER}, eperm},
		{"clone3: any", "clone3", []uint64{0, 88}, enosys},
		{"unshare: CLONE_FS only", "unshare", []uint64{unix.CLONE_FS}, eperm},

		{"personality: PER_LINUX", "personality", []uint64{0}, allow},
		{"personality: PER_LINUX32", "personality", []uint64{8}, allow},
		{"personality: UNAME26", "personality", []uint64{0x20000}, allow},
		{"personality: UNAME26|PER_LINUX32", "personality", []uint64{0x20008}, allow},
		{"personality: query", "personality", []uint64{0xffffffff}, allow},
		{"personality: ADDR_NO_RANDOMIZE", "personality", []uint64{0x0040000}, eperm},
		{"personality: READ_IMPLIES_EXEC", "personality", []uint64{0x0400000}, eperm},
		{"personality: PER_LINUX with high bits", "personality", []uint64{high}, eperm},
		{"personality: query as a 64-bit -1", "personality", []uint64{^uint64(0)}, eperm},

		{"mknod: FIFO", "mknod", []uint64{0, unix.S_IFIFO | 0o644, 0}, allow},
		{"mknod: regular", "mknod", []uint64{0, unix.S_IFREG | 0o644, 0}, allow},
		{"mknod: mode 0 (regular)", "mknod", []uint64{0, 0o644, 0}, allow},
		{"mknod: socket", "mknod", []uint64{0, unix.S_IFSOCK | 0o644, 0}, allow},
		{"mknod: char device", "mknod", []uint64{0, unix.S_IFCHR | 0o644, 0x103}, eperm},
		{"mknod: block device", "mknod", []uint64{0, unix.S_IFBLK | 0o644, 0x700}, eperm},
		{"mknod: char device, high bits", "mknod", []uint64{0, high | unix.S_IFCHR, 0}, eperm},
		{"mknodat: FIFO", "mknodat", []uint64{0, 0, unix.S_IFIFO | 0o644, 0}, allow},
		{"mknodat: char device", "mknodat", []uint64{0, 0, unix.S_IFCHR | 0o644, 0x103}, eperm},
		{"mknodat: block device", "mknodat", []uint64{0, 0, unix.S_IFBLK | 0o644, 0x700}, eperm},
		{"mknodat: the mode in mknod's place does not count", "mknodat", []uint64{0, unix.S_IFCHR, unix.S_IFIFO, 0}, allow},

		{"socket: AF_UNIX", "socket", []uint64{unix.AF_UNIX}, allow},
		{"socket: AF_INET", "socket", []uint64{unix.AF_INET}, allow},
		{"socket: AF_INET6", "socket", []uint64{unix.AF_INET6}, allow},
		{"socket: AF_NETLINK", "socket", []uint64{unix.AF_NETLINK}, allow},
		{"socket: AF_PACKET", "socket", []uint64{unix.AF_PACKET}, allow},
		{"socket: AF_VSOCK (Docker blocks: host/guest)", "socket", []uint64{unix.AF_VSOCK}, eperm},
		{"socket: AF_ALG (Docker blocks: kernel crypto)", "socket", []uint64{unix.AF_ALG}, eperm},
		{"socket: AF_DECnet (removed)", "socket", []uint64{unix.AF_DECnet}, eperm},
		{"socket: AF_INET with high bits", "socket", []uint64{high | unix.AF_INET}, eperm},
		{"socket: past AF_MAX", "socket", []uint64{unix.AF_MAX}, eperm},
	}
	for _, caps := range []struct {
		name string
		caps []capability.Cap
	}{{"none", nil}, {"docker", dockerCaps}, {"all", allCaps()}} {
		f := mustCompile(t, Default(), Options{Caps: caps.caps})
		for _, c := range cases {
			if got := eval(t, f, c.syscall, c.args...); got != c.want {
				t.Errorf("caps %s: %s: %s(%#x) = %v, want %v", caps.name, c.name, c.syscall, c.args, got, c.want)
			}
		}
	}
}

// TestFilter_CapabilityConditions: Docker's capability conditions follow
// Options.Caps, except where the floor overrules them.
func TestFilter_CapabilityConditions(t *testing.T) {
	skipUnlessAMD64(t)
	cases := []struct {
		syscall string
		cap     capability.Cap
		with    Result // with the capability (without it: EPERM)
	}{
		{"chroot", capability.CAP_SYS_CHROOT, allow},
		{"sethostname", capability.CAP_SYS_ADMIN, allow},
		{"syslog", capability.CAP_SYSLOG, allow},
		{"vhangup", capability.CAP_SYS_TTY_CONFIG, allow},
		{"mbind", capability.CAP_SYS_NICE, allow},
		{"kcmp", capability.CAP_SYS_PTRACE, allow},
		// The floor: Docker would allow these with the capability.
		{"mount", capability.CAP_SYS_ADMIN, eperm},
		{"setns", capability.CAP_SYS_ADMIN, eperm},
		{"bpf", capability.CAP_BPF, eperm},
		{"perf_event_open", capability.CAP_PERFMON, eperm},
		{"reboot", capability.CAP_SYS_BOOT, eperm},
		{"init_module", capability.CAP_SYS_MODULE, eperm},
		{"acct", capability.CAP_SYS_PACCT, eperm},
		{"settimeofday", capability.CAP_SYS_TIME, eperm},
		{"open_by_handle_at", capability.CAP_DAC_READ_SEARCH, eperm},
		{"iopl", capability.CAP_SYS_RAWIO, eperm},
	}
	for _, c := range cases {
		without := mustCompile(t, Default(), Options{})
		with := mustCompile(t, Default(), Options{Caps: []capability.Cap{c.cap}})
		if got := eval(t, without, c.syscall); got != eperm {
			t.Errorf("%s without %s: %v, want EPERM", c.syscall, c.cap, got)
		}
		if got := eval(t, with, c.syscall); got != c.with {
			t.Errorf("%s with %s: %v, want %v", c.syscall, c.cap, got, c.with)
		}
	}
	// adjtimex only reads without CAP_SYS_TIME, so it is allowed then;
	// with it, it could set the clock, and it is refused.
	if got := eval(t, mustCompile(t, Default(), Options{Caps: dockerCaps}), "adjtimex"); got != allow {
		t.Errorf("adjtimex without CAP_SYS_TIME: %v, want allow", got)
	}
	if got := eval(t, mustCompile(t, Default(), Options{Caps: []capability.Cap{capability.CAP_SYS_TIME}}), "adjtimex"); got != eperm {
		t.Errorf("adjtimex with CAP_SYS_TIME: %v, want EPERM", got)
	}
	// ptrace: allowed in the task's own PID namespace, refused with the host's.
	if got := eval(t, mustCompile(t, Default(), Options{}), "ptrace"); got != allow {
		t.Errorf("ptrace: %v, want allow", got)
	}
	if got := eval(t, mustCompile(t, Default(), Options{HostPID: true, Caps: allCaps()}), "ptrace"); got != eperm {
		t.Errorf("ptrace with the host's PID namespace: %v, want EPERM", got)
	}
}

// TestFilter_ForeignArchitectures: i386 (int 0x80) and x32 numbers never
// reach x86_64's rules, even where the number is one x86_64 allows.
func TestFilter_ForeignArchitectures(t *testing.T) {
	skipUnlessAMD64(t)
	f := mustCompile(t, Default(), Options{Caps: allCaps()})
	for _, a := range []uint32{unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM, 0} {
		for nr := uint32(0); nr < 500; nr++ {
			if r, err := f.Evaluate(a, nr); err != nil || r != eperm {
				t.Fatalf("arch %#x nr %d: %v %v, want EPERM", a, nr, r, err)
			}
		}
	}
	for nr := uint32(0); nr < 600; nr++ {
		if r, err := f.Evaluate(unix.AUDIT_ARCH_X86_64, nr|0x40000000); err != nil || r != eperm {
			t.Fatalf("x32 nr %d: %v %v, want EPERM", nr, r, err)
		}
	}
}

// TestCompile_DockerDefaultJSON: Docker's default profile as a file (what
// a user copies to start a custom profile) compiles to the program the
// built-in default compiles to.
func TestCompile_DockerDefaultJSON(t *testing.T) {
	data, err := json.Marshal(mobyseccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse("default.json", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, caps := range [][]capability.Cap{nil, dockerCaps, allCaps()} {
		a := mustCompile(t, Default(), Options{Caps: caps}).Instructions()
		b := mustCompile(t, p, Options{Caps: caps}).Instructions()
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("caps %v: default.json compiles to another program", caps)
		}
	}
}

// floorRequired is the floor as issue 21 lists it, written out here and
// not read from floorRefused, so that a name lost from the code fails.
var floorRequired = []string{
	"keyctl", "add_key", "request_key", "unshare", "setns",
	"mount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick", "open_tree",
	"move_mount", "mount_setattr", "bpf", "perf_event_open", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "userfaultfd", "open_by_handle_at", "acct",
	"swapon", "swapoff", "reboot", "settimeofday", "clock_settime",
}

// TestCompile_FloorHoldsForCustomProfiles: a profile that allows every
// syscall by name, compiled for a task with every capability, still
// cannot allow what the floor refuses.
func TestCompile_FloorHoldsForCustomProfiles(t *testing.T) {
	skipUnlessAMD64(t)
	var names []string
	for _, s := range systab.X86_64.Table {
		names = append(names, s.Name)
	}
	data, err := json.Marshal(map[string]any{
		"defaultAction": "SCMP_ACT_ERRNO",
		"syscalls":      []any{map[string]any{"names": names, "action": "SCMP_ACT_ALLOW"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse("everything.json", data)
	if err != nil {
		t.Fatal(err)
	}
	f := mustCompile(t, p, Options{Caps: allCaps()})
	for _, n := range floorRequired {
		if got := eval(t, f, n); got != eperm {
			t.Errorf("%s: %v, want EPERM", n, got)
		}
	}
	for _, n := range []string{"adjtimex", "clock_adjtime"} {
		if got := eval(t, f, n); got != eperm {
			t.Errorf("%s with CAP_SYS_TIME: %v, want EPERM", n, got)
		}
	}
	for _, c := range []struct {
		name string
		args []uint64
		want Result
	}{
		{"clone", []uint64{unix.CLONE_NEWUSER}, eperm}, {"clone", []uint64{unix.CLONE_THREAD}, allow},
		{"clone3", nil, enosys},
		{"mknod", []uint64{0, unix.S_IFCHR}, eperm}, {"mknod", []uint64{0, unix.S_IFIFO}, allow},
		{"mknodat", []uint64{0, 0, unix.S_IFBLK}, eperm}, {"mknodat", []uint64{0, 0, unix.S_IFREG}, allow},
		{"personality", []uint64{0x0040000}, eperm}, {"personality", []uint64{0}, allow},
		{"ptrace", nil, allow}, {"read", nil, allow}, {"kcmp", nil, allow},
	} {
		if got := eval(t, f, c.name, c.args...); got != c.want {
			t.Errorf("%s(%#x) = %v, want %v", c.name, c.args, got, c.want)
		}
	}
	hostPID := mustCompile(t, p, Options{Caps: allCaps(), HostPID: true})
	for _, n := range []string{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp"} {
		if got := eval(t, hostPID, n); got != eperm {
			t.Errorf("%s with the host's PID namespace: %v, want EPERM", n, got)
		}
	}
}

// TestCompile_CustomActions: per-rule errnos, kill, trap and log, the
// default errno, argument comparisons of every operator, first match wins.
func TestCompile_CustomActions(t *testing.T) {
	skipUnlessAMD64(t)
	p, err := Parse("custom.json", []byte(`{
		"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 38,
		"syscalls": [
			{"names": ["getpid"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13},
			{"names": ["getppid"], "action": "SCMP_ACT_KILL_PROCESS"},
			{"names": ["gettid"], "action": "SCMP_ACT_TRAP"},
			{"names": ["getuid"], "action": "SCMP_ACT_LOG"},
			{"names": ["getgid"], "action": "SCMP_ACT_KILL"},
			{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 3, "op": "SCMP_CMP_LT"}]},
			{"names": ["read"], "action": "SCMP_ACT_ERRNO", "errnoRet": 9},
			{"names": ["write"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 2, "value": 255, "valueTwo": 16, "op": "SCMP_CMP_MASKED_EQ"}]},
			{"name": "lseek", "action": "SCMP_ACT_ALLOW", "args": [{"index": 1, "value": 10, "op": "SCMP_CMP_GE"}, {"index": 1, "value": 20, "op": "SCMP_CMP_LE"}]}
		]}`))
	if err != nil {
		t.Fatal(err)
	}
	f := mustCompile(t, p, Options{})
	for _, c := range []struct {
		name string
		args []uint64
		want Result
	}{
		{"getpid", nil, Result{Action: ActErrno, Errno: syscall.EACCES}},
		{"getppid", nil, Result{Action: ActKillProcess}},
		{"gettid", nil, Result{Action: ActTrap}},
		{"getuid", nil, Result{Action: ActLog}},
		{"getgid", nil, Result{Action: ActKillThread}},
		{"read", []uint64{2}, allow},
		{"read", []uint64{3}, Result{Action: ActErrno, Errno: syscall.EBADF}},
		{"write", []uint64{0, 0, 0x110}, allow},
		{"write", []uint64{0, 0, 0x111}, Result{Action: ActErrno, Errno: syscall.ENOSYS}},
		{"lseek", []uint64{0, 9}, Result{Action: ActErrno, Errno: syscall.ENOSYS}},
		{"lseek", []uint64{0, 10}, allow},
		{"lseek", []uint64{0, 20}, allow},
		{"lseek", []uint64{0, 21}, Result{Action: ActErrno, Errno: syscall.ENOSYS}},
		{"close", nil, Result{Action: ActErrno, Errno: syscall.ENOSYS}},
	} {
		if got := eval(t, f, c.name, c.args...); got != c.want {
			t.Errorf("%s(%#x) = %v, want %v", c.name, c.args, got, c.want)
		}
	}
}

// TestAssemble_MatchesReference is a property: for random rules over a
// few syscall numbers (every operator, values and masks that straddle the
// 32-bit halves, enough rules to force long jumps), the compiled program,
// run in the BPF VM, decides every random call as a direct reading of the
// rules does (first rule whose conditions all hold; else the default).
func TestAssemble_MatchesReference(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		interesting := []uint64{0, 1, 2, 0x7fffffff, 0x80000000, 0xffffffff, 1 << 32, 1<<32 | 1, 0xffffffff00000000, ^uint64(0), 0x10000000}
		val := rapid.Custom(func(t *rapid.T) uint64 {
			if rapid.Bool().Draw(t, "pick") {
				return rapid.SampledFrom(interesting).Draw(t, "interesting")
			}
			return rapid.Uint64().Draw(t, "any")
		})
		genCond := rapid.Custom(func(t *rapid.T) cond {
			return cond{
				arg:   uint8(rapid.IntRange(0, 5).Draw(t, "arg")),
				op:    op(rapid.IntRange(int(opEq), int(opMaskedNe)).Draw(t, "op")),
				value: val.Draw(t, "value"),
				mask:  val.Draw(t, "mask"),
			}
		})
		rets := []uint32{retAllow, retErrno | 1, retErrno | 38, retKillProcess, retTrap, retLog}
		rules := map[int][]rule{}
		nrs := rapid.SliceOfNDistinct(rapid.IntRange(0, 40), 1, 12, rapid.ID[int]).Draw(t, "nrs")
		for _, nr := range nrs {
			n := rapid.IntRange(0, 30).Draw(t, "rules")
			for range n {
				rules[nr] = append(rules[nr], rule{
					conds: rapid.SliceOfN(genCond, 0, 6).Draw(t, "conds"),
					ret:   rapid.SampledFrom(rets).Draw(t, "ret"),
				})
			}
		}
		def := rapid.SampledFrom([]uint32{retErrno | 1, retKillThread}).Draw(t, "default")
		prog, err := assemble(systab.X86_64, rules, def)
		if errors.Is(err, ErrTooLarge) {
			return // past BPF's 4,096 instructions: refused by name, which is the answer
		}
		if err != nil {
			t.Fatal(err)
		}
		f := &Filter{arch: systab.X86_64, prog: prog, defRet: def}
		for range 50 {
			nr := uint32(rapid.IntRange(0, 45).Draw(t, "call nr"))
			var args [6]uint64
			for i := range args {
				args[i] = val.Draw(t, "call arg")
			}
			got, err := f.Evaluate(systab.X86_64.Audit, nr, args[:]...)
			if err != nil {
				t.Fatal(err)
			}
			if want := resultOf(reference(rules[int(nr)], args, def)); got != want {
				t.Fatalf("nr %d args %#x: program says %v, the rules %v\n%s", nr, args, got, want, f)
			}
		}
	})
}

// reference decides a call straight from the rules.
func reference(rules []rule, args [6]uint64, def uint32) uint32 {
next:
	for _, r := range rules {
		for _, c := range r.conds {
			a := args[c.arg]
			var ok bool
			switch c.op {
			case opEq:
				ok = a == c.value
			case opNe:
				ok = a != c.value
			case opLt:
				ok = a < c.value
			case opLe:
				ok = a <= c.value
			case opGt:
				ok = a > c.value
			case opGe:
				ok = a >= c.value
			case opMaskedEq:
				ok = a&c.mask == c.value
			case opMaskedNe:
				ok = a&c.mask != c.value
			}
			if !ok {
				continue next
			}
		}
		return r.ret
	}
	return def
}

// TestAssemble_LongJumps: a tree whose left halves pass 255 instructions
// (many syscalls with long rules) still decides every number right.
func TestAssemble_LongJumps(t *testing.T) {
	rules := map[int][]rule{}
	long := rule{ret: retAllow}
	for i := range 6 {
		long.conds = append(long.conds, cond{arg: uint8(i), op: opEq, value: uint64(i)})
	}
	for nr := 0; nr < 200; nr += 2 {
		rules[nr] = []rule{long, {ret: retErrno | uint32(nr)}}
	}
	prog, err := assemble(systab.X86_64, rules, retErrno|1)
	if err != nil {
		t.Fatal(err)
	}
	if !containsJa(prog) {
		t.Fatal("no long jump was needed: the test does not test them")
	}
	f := &Filter{arch: systab.X86_64, prog: prog}
	for nr := range 210 {
		want := Result{Action: ActErrno, Errno: 1}
		if nr < 200 && nr%2 == 0 {
			want = Result{Action: ActErrno, Errno: syscall.Errno(nr)}
		}
		if got, _ := f.Evaluate(systab.X86_64.Audit, uint32(nr)); got != want {
			t.Fatalf("nr %d: %v, want %v", nr, got, want)
		}
		if nr < 200 && nr%2 == 0 {
			if got, _ := f.Evaluate(systab.X86_64.Audit, uint32(nr), 0, 1, 2, 3, 4, 5); got != allow {
				t.Fatalf("nr %d with matching args: %v, want allow", nr, got)
			}
		}
	}
}

func containsJa(prog []bpf.Instruction) bool {
	for _, in := range prog {
		if _, ok := in.(bpf.Jump); ok {
			return true
		}
	}
	return false
}

// TestCompile_Deterministic: the same profile and options give the same
// program (maps are iterated in order).
func TestCompile_Deterministic(t *testing.T) {
	a := mustCompile(t, Default(), Options{Caps: dockerCaps}).String()
	for range 5 {
		if b := mustCompile(t, Default(), Options{Caps: dockerCaps}).String(); a != b {
			t.Fatal("two compilations differ")
		}
	}
}

var _ = specs.ActAllow

// TestFilter_BinaryRoundTrip: a filter written by MarshalBinary and read
// back by UnmarshalBinary is the same program, with the same verdicts; a
// truncated or foreign one is refused.
func TestFilter_BinaryRoundTrip(t *testing.T) {
	f, err := Compile(Default(), Options{Caps: dockerCaps})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var g Filter
	if err := g.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if g.String() != f.String() || g.defRet != f.defRet || g.flags != f.flags || g.Arch() != f.Arch() {
		t.Fatalf("the program changed in its binary form:\n%s\nwant\n%s", g.String(), f.String())
	}
	for _, nr := range []uint32{0, 41, 56, 165, 250, 435} {
		a, _ := f.Evaluate(f.Arch(), nr, 0x7e000000)
		b, _ := g.Evaluate(g.Arch(), nr, 0x7e000000)
		if a != b {
			t.Errorf("syscall %d: %v after the round trip, %v before", nr, b, a)
		}
	}
	for name, bad := range map[string][]byte{
		"truncated": b[:len(b)-1], "empty": nil, "header only": b[:binaryHeader],
		"foreign arch": append(append([]byte{}, b[:4]...), append([]byte{3, 0, 0, 0x40}, b[8:]...)...),
	} {
		if err := new(Filter).UnmarshalBinary(bad); !errors.Is(err, ErrBadBinary) {
			t.Errorf("%s: %v, want ErrBadBinary", name, err)
		}
	}
}
