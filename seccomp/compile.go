package seccomp

import (
	"fmt"
	"runtime"
	"slices"
	"syscall"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/moby/sys/capability"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

// Options are what a filter depends on besides its profile.
type Options struct {
	// Caps is every capability the task can hold: its bounding set (tether
	// sets the bounding, permitted and effective sets alike). A profile's
	// includes/excludes conditions are evaluated against it, as Docker
	// evaluates them against the container's bounding set: Docker's default
	// allows mount to a task with CAP_SYS_ADMIN, reboot to one with
	// CAP_SYS_BOOT. The floor (see the package doc) is not: it refuses
	// whatever Caps holds.
	Caps []capability.Cap
	// HostPID says the task shares the host's PID namespace (pid_mode =
	// "host", or raw_exec): ptrace and the other calls that reach into
	// another process (process_vm_readv/writev, process_madvise,
	// pidfd_getfd, kcmp) are then refused whatever Caps holds, since the
	// processes the task could name are no longer only its own.
	HostPID bool

	// refuseErrno, when not zero, replaces EPERM as the errno of the
	// default action and of the floor's refusals. Only the census sets it,
	// to tell a refusal by the filter from the kernel's own EPERM.
	refuseErrno syscall.Errno
}

// Compile builds the filter for profile p and the task's options, for the
// architecture this binary runs on. The same profile and options always
// give the same program.
func Compile(p *Profile, o Options) (*Filter, error) {
	arch := systab.ByGOARCH(runtime.GOARCH)
	if arch == nil {
		return nil, fmt.Errorf("%w (%s)", ErrUnsupportedArch, runtime.GOARCH)
	}
	return compileFor(arch, p, o)
}

// compileFor compiles for arch, which must be the architecture the
// profile's conditions are evaluated for (moby's evaluation reads
// runtime.GOARCH).
func compileFor(arch *systab.Arch, p *Profile, o Options) (*Filter, error) {
	// The includes/excludes conditions (capabilities, architecture, kernel
	// version) are evaluated by moby's code, as Docker evaluates them.
	spec := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	for _, c := range o.Caps {
		spec.Process.Capabilities.Bounding = append(spec.Process.Capabilities.Bounding, capName(c))
	}
	var (
		ls  *specs.LinuxSeccomp
		err error
	)
	if p.IsDefault() {
		ls, err = mobyseccomp.GetDefaultProfile(spec)
	} else {
		ls, err = mobyseccomp.LoadProfile(string(p.data), spec)
	}
	if err != nil {
		return nil, &ProfileError{Source: p.source, Rule: -1, Err: fmt.Errorf("%w: %w", ErrProfileSyntax, err)}
	}
	if ls == nil {
		return nil, &ProfileError{Source: p.source, Rule: -1, Err: ErrEmptyProfile}
	}
	return compileSpec(arch, p.source, ls, o)
}

// compileSpec compiles an evaluated profile: the floor first, then the
// profile's rules in order; the first rule whose argument conditions all
// hold decides, and a syscall no rule decides gets the default action.
func compileSpec(arch *systab.Arch, source string, ls *specs.LinuxSeccomp, o Options) (*Filter, error) {
	bad := func(rule int, field string, err error) error {
		return &ProfileError{Source: source, Rule: rule, Field: field, Err: err}
	}
	refuseErrno := syscall.EPERM
	if o.refuseErrno != 0 {
		refuseErrno = o.refuseErrno
	}
	def, err := parseAction(ls.DefaultAction)
	if err != nil {
		return nil, bad(-1, "defaultAction", err)
	}
	if def.allows() {
		return nil, bad(-1, "defaultAction", fmt.Errorf("%w: %s", ErrDenyList, ls.DefaultAction))
	}
	defErrno := syscall.EPERM
	if ls.DefaultErrnoRet != nil {
		defErrno = syscall.Errno(*ls.DefaultErrnoRet)
	}
	if o.refuseErrno != 0 {
		defErrno = o.refuseErrno
	}
	f := &Filter{arch: arch, defRet: ret(def, defErrno)}
	for _, fl := range ls.Flags {
		switch fl {
		case specs.LinuxSeccompFlagLog:
			f.flags |= filterFlagLog
		case specs.LinuxSeccompFlagSpecAllow:
			f.flags |= filterFlagSpecAllow
		}
	}

	rules := floor(arch, o, ret(ActErrno, refuseErrno))
	for i, sc := range ls.Syscalls {
		act, err := parseAction(sc.Action)
		if err != nil {
			return nil, bad(i, "action", err)
		}
		e := syscall.EPERM
		if sc.ErrnoRet != nil {
			e = syscall.Errno(*sc.ErrnoRet)
		}
		r := rule{ret: ret(act, e)}
		for _, a := range sc.Args {
			c, err := condOf(a)
			if err != nil {
				return nil, bad(i, "args", err)
			}
			r.conds = append(r.conds, c)
		}
		for _, name := range sc.Names {
			// A name this architecture lacks (chown32 on x86_64) is left
			// out, as libseccomp leaves it out. (Parse has checked that
			// some architecture has it.)
			if nr, ok := arch.Number(name); ok {
				rules[nr] = append(rules[nr], r)
			}
		}
	}
	prog, err := assemble(arch, rules, f.defRet)
	if err != nil {
		return nil, err
	}
	f.prog = prog
	return f, nil
}

// nsFlags are the clone flags that make a namespace (CLONE_NEWTIME is not
// one clone(2) can pass: that bit is part of the exit signal there).
const nsFlags = syscall.CLONE_NEWNS | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC |
	syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNET | 0x02000000 // CLONE_NEWCGROUP

// File types, for mknod's mode (sys/stat.h).
const (
	sIFMT  = 0o170000
	sIFCHR = 0o020000
	sIFBLK = 0o060000
)

// personalities are the personality(2) arguments Docker's profile allows:
// PER_LINUX, PER_LINUX32, UNAME26, UNAME26|PER_LINUX32 and the query.
var personalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// floorRefused are the syscalls refused to every task whatever its
// capabilities and profile (see the package doc).
var floorRefused = []string{
	// keys: the operator's session keyring, root's user keyring
	"keyctl", "add_key", "request_key",
	// namespaces: a user namespace gives back every capability inside it
	"unshare", "setns",
	// mounts: remount the cgroup hierarchies, undo the read-only binds
	"mount", "umount", "umount2", "pivot_root", "fsopen", "fsmount", "fsconfig", "fspick",
	"open_tree", "open_tree_attr", "move_mount", "mount_setattr",
	// the kernel itself
	"bpf", "perf_event_open", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "iopl", "ioperm",
	"userfaultfd", "open_by_handle_at",
	// the host's accounting, swap, power and clock
	"acct", "swapon", "swapoff", "reboot",
	"settimeofday", "stime", "clock_settime", "clock_settime64",
}

// traceCalls reach into another process; refused when the task shares the
// host's PID namespace.
var traceCalls = []string{"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp"}

// timeAdjust set the clock when the task holds CAP_SYS_TIME and only read
// it otherwise: what they do hangs on a struct the filter cannot see.
var timeAdjust = []string{"adjtimex", "clock_adjtime", "clock_adjtime64"}

// floor returns the floor's rules by syscall number. refuse is the
// refusal's return value (EPERM).
func floor(arch *systab.Arch, o Options, refuse uint32) map[int][]rule {
	rules := map[int][]rule{}
	add := func(name string, r ...rule) {
		if nr, ok := arch.Number(name); ok {
			rules[nr] = append(rules[nr], r...)
		}
	}
	for _, n := range floorRefused {
		add(n, rule{ret: refuse})
	}
	if o.HostPID {
		for _, n := range traceCalls {
			add(n, rule{ret: refuse})
		}
	}
	if slices.Contains(o.Caps, capability.CAP_SYS_TIME) {
		for _, n := range timeAdjust {
			add(n, rule{ret: refuse})
		}
	}
	// clone3 passes its flags in a struct the filter cannot read: ENOSYS,
	// so that glibc (2.34 and later) falls back to clone, whose flags it
	// can. EPERM would fail thread creation instead.
	add("clone3", rule{ret: ret(ActErrno, syscall.ENOSYS)})
	// clone with a namespace flag. Its flags are argument 0 on x86_64,
	// i386 and aarch64 (s390 differs, and has no table here).
	add("clone", rule{ret: refuse, conds: []cond{{arg: 0, op: opMaskedNe, mask: nsFlags, value: 0}}})
	// mknod and mknodat of a character or block device; FIFOs, sockets
	// and regular files stay.
	for _, m := range []struct {
		name string
		arg  uint8
	}{{"mknod", 1}, {"mknodat", 2}} {
		add(m.name,
			rule{ret: refuse, conds: []cond{{arg: m.arg, op: opMaskedEq, mask: sIFMT, value: sIFCHR}}},
			rule{ret: refuse, conds: []cond{{arg: m.arg, op: opMaskedEq, mask: sIFMT, value: sIFBLK}}})
	}
	// personality, but for the values Docker allows.
	pr := rule{ret: refuse}
	for _, v := range personalities {
		pr.conds = append(pr.conds, cond{arg: 0, op: opNe, value: v})
	}
	add("personality", pr)
	return rules
}

// rule is one decision for one syscall: when every condition holds, the
// filter returns ret.
type rule struct {
	conds []cond
	ret   uint32
}

// op is an argument comparison, on the argument's 64 bits.
type op uint8

const (
	opEq       op = iota // arg == value
	opNe                 // arg != value
	opLt                 // arg < value (unsigned)
	opLe                 // arg <= value
	opGt                 // arg > value
	opGe                 // arg >= value
	opMaskedEq           // arg & mask == value
	opMaskedNe           // arg & mask != value (the floor's)
)

type cond struct {
	arg   uint8
	op    op
	value uint64
	mask  uint64
}

func parseOp(o specs.LinuxSeccompOperator) (op, error) {
	switch o {
	case specs.OpEqualTo:
		return opEq, nil
	case specs.OpNotEqual:
		return opNe, nil
	case specs.OpLessThan:
		return opLt, nil
	case specs.OpLessEqual:
		return opLe, nil
	case specs.OpGreaterThan:
		return opGt, nil
	case specs.OpGreaterEqual:
		return opGe, nil
	case specs.OpMaskedEqual:
		return opMaskedEq, nil
	}
	return 0, fmt.Errorf("%w %q (Docker's are SCMP_CMP_EQ, SCMP_CMP_NE, SCMP_CMP_LT, SCMP_CMP_LE, SCMP_CMP_GT, SCMP_CMP_GE, SCMP_CMP_MASKED_EQ)", ErrUnknownOperator, o)
}

// condOf converts a profile's comparison. SCMP_CMP_MASKED_EQ's value is
// the mask and valueTwo the value, as in libseccomp.
func condOf(a specs.LinuxSeccompArg) (cond, error) {
	if a.Index > 5 {
		return cond{}, fmt.Errorf("%w: argument index %d", ErrBadRule, a.Index)
	}
	o, err := parseOp(a.Op)
	if err != nil {
		return cond{}, err
	}
	if o == opMaskedEq {
		return cond{arg: uint8(a.Index), op: o, mask: a.Value, value: a.ValueTwo}, nil
	}
	return cond{arg: uint8(a.Index), op: o, value: a.Value}, nil
}
