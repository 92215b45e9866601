// Command census tries every syscall of this architecture's table, and a
// few argument-conditioned cases, with arguments that make an allowed
// call fail harmlessly (a bad descriptor, pointer or flag: EBADF, EFAULT,
// EINVAL) or do nothing to the host, and prints one line per probe:
//
//	name <TAB> number <TAB> arguments <TAB> result <TAB> verdict
//
// result is "ok" or the errno's name; verdict is "EPERM" when the errno
// is the filter's refusal (-errno, EPERM unless told), "ENOSYS" for
// ENOSYS, else "allowed". A kernel ENOSYS (an unimplemented syscall) and
// a kernel EPERM read the same as the filter's: run the census without a
// filter too, and give the filter a distinct errno (-errno), to tell them
// apart. It is static (CGO_ENABLED=0) so that it runs in any root:
// tether's exec task, runc's bundle.
//
// Not probed, and said so in the output: exit and exit_group (they end
// the probe), pause (it waits for a signal), rt_sigreturn (it restores a
// frame the probe does not have), vfork (the child would run on the
// probe's stack), uretprobe and uprobe (the kernel kills a caller outside
// a probe trampoline).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/seccomp/internal/systab"
)

const all = ^uintptr(0) // -1: every argument invalid unless a probe says otherwise

// skipped are the syscalls not probed, with why.
var skipped = map[string]string{
	"exit":         "ends the probe",
	"exit_group":   "ends the probe",
	"pause":        "waits for a signal",
	"rt_sigreturn": "restores a signal frame the probe does not have",
	"vfork":        "the child would run on the probe's stack",
	"uretprobe":    "the kernel kills a caller outside a uretprobe trampoline",
	"uprobe":       "the kernel kills a caller outside a uprobe trampoline",
}

// node is a relative path: with dirfd -1, mknodat fails with EBADF.
var node = []byte("census-node\x00")

func p(b []byte) uintptr { return uintptr(unsafe.Pointer(&b[0])) }

// args are the arguments of the syscalls where -1 everywhere would not do.
var args = map[string][]uintptr{
	// Without flags that fail (CLONE_THREAD without CLONE_SIGHAND is
	// EINVAL), a clone would make a process.
	"clone": {unix.CLONE_THREAD, 0, 0, 0, 0, 0},
	// The query: the kernel takes the low 32 bits, the filters all 64.
	"personality": {0xffffffff},
	// A family every filter allows, and a type that fails.
	"socket": {unix.AF_INET, all, all},
	// Without IPC_CREAT: ENOENT rather than a new object.
	"msgget": {all, 0},
	"semget": {all, 0, 0},
	"shmget": {all, 0, 0},
}

// probe is one line of the census.
type probe struct {
	name string // the syscall, or the syscall and the case
	nr   int
	args []uintptr
	fork bool // fork: the child exits at once
}

// cases are the argument-conditioned probes beside the table's.
func cases(a *systab.Arch) []probe {
	nr := func(n string) int { v, _ := a.Number(n); return v }
	return []probe{
		{name: "clone(CLONE_NEWUSER)", nr: nr("clone"), args: []uintptr{unix.CLONE_NEWUSER | unix.CLONE_THREAD, 0, 0, 0, 0, 0}},
		{name: "clone(CLONE_NEWNET)", nr: nr("clone"), args: []uintptr{unix.CLONE_NEWNET | unix.CLONE_THREAD, 0, 0, 0, 0, 0}},
		{name: "personality(ADDR_NO_RANDOMIZE)", nr: nr("personality"), args: []uintptr{0x0040000}},
		{name: "socket(AF_UNIX)", nr: nr("socket"), args: []uintptr{unix.AF_UNIX, all, all}},
		{name: "socket(AF_INET6)", nr: nr("socket"), args: []uintptr{unix.AF_INET6, all, all}},
		{name: "socket(AF_NETLINK)", nr: nr("socket"), args: []uintptr{unix.AF_NETLINK, all, all}},
		{name: "socket(AF_PACKET)", nr: nr("socket"), args: []uintptr{unix.AF_PACKET, all, all}},
		{name: "socket(AF_VSOCK)", nr: nr("socket"), args: []uintptr{unix.AF_VSOCK, all, all}},
		{name: "socket(AF_ALG)", nr: nr("socket"), args: []uintptr{unix.AF_ALG, all, all}},
		{name: "mknodat(S_IFIFO)", nr: nr("mknodat"), args: []uintptr{all, p(node), unix.S_IFIFO | 0o600, 0}},
		{name: "mknodat(S_IFCHR)", nr: nr("mknodat"), args: []uintptr{all, p(node), unix.S_IFCHR | 0o600, 0x103}},
		{name: "mknodat(S_IFBLK)", nr: nr("mknodat"), args: []uintptr{all, p(node), unix.S_IFBLK | 0o600, 0x700}},
	}
}

func main() {
	refused := flag.Int("errno", int(unix.EPERM), "the errno the filter refuses with")
	flag.Parse()
	runtime.LockOSThread()
	a := systab.ByGOARCH(runtime.GOARCH)
	if a == nil {
		fmt.Fprintf(os.Stderr, "census: no syscall table for %s\n", runtime.GOARCH)
		os.Exit(2)
	}
	var probes []probe
	for _, nr := range a.Numbers() {
		name := a.Names(nr)[0]
		if _, ok := skipped[name]; ok {
			probes = append(probes, probe{name: name, nr: -1})
			continue
		}
		pr := probe{name: name, nr: nr, args: args[name]}
		if pr.args == nil {
			pr.args = []uintptr{all, all, all, all, all, all}
		}
		if name == "fork" {
			pr.args, pr.fork = nil, true
		}
		probes = append(probes, pr)
	}
	probes = append(probes, cases(a)...)

	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	for _, pr := range probes {
		if pr.nr < 0 {
			fmt.Fprintf(w, "%s\t-\t-\tnot-probed\t%s\n", pr.name, skipped[pr.name])
			continue
		}
		e := call(pr)
		result, verdict := "ok", "allowed"
		if e != 0 {
			result = unix.ErrnoName(e)
			if result == "" {
				result = fmt.Sprint(int(e))
			}
			switch e {
			case syscall.Errno(*refused):
				verdict = "EPERM"
			case unix.ENOSYS:
				verdict = "ENOSYS"
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", pr.name, pr.nr, hexArgs(pr.args), result, verdict)
	}
}

// call makes the probe's syscall; fork's child exits at once.
func call(pr probe) syscall.Errno {
	var a [6]uintptr
	copy(a[:], pr.args)
	if pr.fork {
		pid, _, e := syscall.RawSyscall(uintptr(pr.nr), 0, 0, 0)
		if e != 0 {
			return e
		}
		if pid == 0 {
			syscall.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(int(pid), &ws, 0, nil)
		return 0
	}
	_, _, e := syscall.Syscall6(uintptr(pr.nr), a[0], a[1], a[2], a[3], a[4], a[5])
	return e
}

// hexArgs prints the arguments as the filter sees them ("fork" has none).
func hexArgs(a []uintptr) string {
	if len(a) == 0 {
		return "-"
	}
	var b []byte
	for i, v := range a {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, "%#x", v)
	}
	return string(b)
}
