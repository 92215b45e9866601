//go:build linux

package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
)

// Launch modes.
const (
	// ModeExec runs the task with a restricted capability set: the
	// capabilities in DefaultAllowedCaps ∩ AllowedCaps, plus CapAdd, minus
	// CapDrop, as its bounding, permitted, effective and inheritable sets
	// (and ambient for a non-root task).
	ModeExec = "exec"
	// ModeRawExec runs the command as is, with the executor's capabilities
	// (or the user's, when User is set). CapAdd and CapDrop are ignored.
	ModeRawExec = "raw_exec"
)

// LaunchSpec describes the task to launch.
type LaunchSpec struct {
	Mode    string            `json:"mode"`    // ModeExec or ModeRawExec
	Command string            `json:"command"` // a path, or a name looked up in Env's PATH (else the executor's)
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"` // the task's whole environment
	Dir     string            `json:"dir,omitempty"` // working directory; "" is the task directory; relative to it otherwise
	User    string            `json:"user,omitempty"`
	CapAdd  []string          `json:"cap_add,omitempty"`
	CapDrop []string          `json:"cap_drop,omitempty"`
	// AllowedCaps is the allow list for CapAdd; nil means DefaultAllowedCaps.
	AllowedCaps []string `json:"allowed_caps"`
}

// Status is what the executor knows of its task.
type Status struct {
	Launched  bool           `json:"launched"`
	PID       int            `json:"pid"`
	StartTime uint64         `json:"start_time"`
	Exited    bool           `json:"exited"` // the task (its leader) has exited; Wait also waits for the rest of its tree
	Exit      fsm.ExitStatus `json:"exit"`
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// taskUser is a resolved LaunchSpec.User; uid -1 means the executor's own.
type taskUser struct {
	uid, gid int
	groups   []int
}

func lookupUser(name string) (taskUser, error) {
	if name == "" {
		return taskUser{uid: -1, gid: -1}, nil
	}
	var u *user.User
	var err error
	if _, nerr := strconv.Atoi(name); nerr == nil {
		u, err = user.LookupId(name)
	} else {
		u, err = user.Lookup(name)
	}
	if err != nil {
		return taskUser{}, fmt.Errorf("%w: %q: %w", ErrUnknownUser, name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return taskUser{}, fmt.Errorf("%w: %q has no numeric uid/gid", ErrUnknownUser, name)
	}
	tu := taskUser{uid: uid, gid: gid}
	if ids, err := u.GroupIds(); err == nil {
		for _, g := range ids {
			if n, err := strconv.Atoi(g); err == nil {
				tu.groups = append(tu.groups, n)
			}
		}
	}
	return tu, nil
}

// resolveCommand finds the executable the way execvp would, telling a
// missing command from one that cannot be executed.
func resolveCommand(cmd, dir, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		p := cmd
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return p, checkExecutable(p)
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	var notExec error
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, cmd)
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if errors.Is(err, ErrNotExecutable) && notExec == nil {
			notExec = err
		}
	}
	if notExec != nil {
		return "", notExec
	}
	return "", fmt.Errorf("%w: %q not in PATH %s", ErrCommandNotFound, cmd, pathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s", ErrCommandNotFound, p)
	case err != nil:
		return fmt.Errorf("%w: %s: %w", ErrNotExecutable, p, err)
	case fi.IsDir():
		return fmt.Errorf("%w: %s is a directory", ErrNotExecutable, p)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("%w: %s has no execute permission", ErrNotExecutable, p)
	}
	return nil
}

// execErr classifies an execve or fork error.
func execErr(path string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("%w: %s: %w", ErrCommandNotFound, path, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ETXTBSY):
		return fmt.Errorf("%w: %s: %w", ErrNotExecutable, path, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrLaunch, path, err)
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// startTask starts the task as a child of the executor, in its own process
// group, with stdout and stderr going to files in the task directory. In
// exec mode the child is this binary in shim mode, which sets the
// capabilities and the user on its one thread and then execs the task.
func (s *server) startTask(spec LaunchSpec) (int, uint64, error) {
	if spec.Mode != ModeExec && spec.Mode != ModeRawExec {
		return 0, 0, fmt.Errorf("%w: mode %q (want %q or %q)", ErrBadSpec, spec.Mode, ModeExec, ModeRawExec)
	}
	if spec.Command == "" {
		return 0, 0, fmt.Errorf("%w: empty command", ErrBadSpec)
	}
	dir := spec.Dir
	if dir == "" {
		dir = s.taskDir
	} else if !filepath.IsAbs(dir) {
		dir = filepath.Join(s.taskDir, dir)
	}
	if fi, err := os.Stat(dir); err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrWorkDir, err)
	} else if !fi.IsDir() {
		return 0, 0, fmt.Errorf("%w: %s is not a directory", ErrWorkDir, dir)
	}
	var caps []capability.Cap
	if spec.Mode == ModeExec {
		var err error
		if caps, err = resolveCaps(spec.CapAdd, spec.CapDrop, spec.AllowedCaps); err != nil {
			return 0, 0, err
		}
	}
	tu, err := lookupUser(spec.User)
	if err != nil {
		return 0, 0, err
	}
	if euid := os.Geteuid(); tu.uid >= 0 && euid != 0 && tu.uid != euid {
		return 0, 0, fmt.Errorf("%w: an executor running as uid %d cannot run a task as uid %d", ErrLaunch, euid, tu.uid)
	}
	pathEnv, ok := spec.Env["PATH"]
	if !ok {
		pathEnv = os.Getenv("PATH")
	}
	path, err := resolveCommand(spec.Command, dir, pathEnv)
	if err != nil {
		return 0, 0, err
	}

	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrLaunch, err)
	}
	defer devnull.Close()
	var outs [2]*os.File
	for i, name := range []string{StdoutFile, StderrFile} {
		f, err := os.OpenFile(filepath.Join(s.taskDir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrLaunch, err)
		}
		defer f.Close()
		if tu.uid >= 0 {
			_ = f.Chown(tu.uid, tu.gid)
		}
		outs[i] = f
	}
	argv := append([]string{spec.Command}, spec.Args...)
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	files := []uintptr{devnull.Fd(), outs[0].Fd(), outs[1].Fd()}
	exe := path

	var errR, errW *os.File
	if spec.Mode == ModeExec {
		if s.prefix == nil {
			return 0, 0, fmt.Errorf("%w: exec mode needs Serve called with a tail of os.Args", ErrLaunch)
		}
		r, w, err := os.Pipe()
		if err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrLaunch, err)
		}
		defer r.Close()
		defer w.Close()
		errR, errW = r, w
		files = append(files, w.Fd())
		exe = "/proc/self/exe"
		argv = shimArgv(s.prefix, caps, tu, path, argv)
	} else if tu.uid >= 0 {
		sys.Credential = &syscall.Credential{Uid: uint32(tu.uid), Gid: uint32(tu.gid), Groups: toU32(tu.groups)}
	}
	pid, err := syscall.ForkExec(exe, argv, &syscall.ProcAttr{Dir: dir, Env: envList(spec.Env), Files: files, Sys: sys})
	if err != nil {
		return 0, 0, execErr(path, err)
	}
	start, serr := ProcStartTime(pid) // our unreaped child: the pid cannot be reused yet
	if errR != nil {
		errW.Close() // or the read never sees EOF
		if err := shimResult(errR); err != nil {
			return 0, 0, err // the shim exited; reap collects it
		}
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("%w: %w", ErrLaunch, serr)
	}
	return pid, start, nil
}

func toU32(in []int) []uint32 {
	out := make([]uint32, len(in))
	for i, v := range in {
		out[i] = uint32(v)
	}
	return out
}

// shimResult waits for the shim's verdict: EOF with nothing written means the
// exec succeeded (the pipe is close-on-exec in the shim); otherwise the shim
// wrote why it failed.
func shimResult(r *os.File) error {
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	var w wireError
	err := readFrame(r, &w)
	switch {
	case err == nil:
		return w.err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: shim gave no verdict", ErrLaunch)
	default:
		return nil // EOF: exec happened
	}
}

const shimFlag = "-shim"

// shimArgv builds the argv that re-executes this binary as the shim:
// prefix, -shim, caps mask, uid, gid, groups, then the task's path and argv.
func shimArgv(prefix []string, caps []capability.Cap, tu taskUser, path string, argv []string) []string {
	groups := make([]string, len(tu.groups))
	for i, g := range tu.groups {
		groups[i] = strconv.Itoa(g)
	}
	out := slices.Clone(prefix)
	out = append(out, shimFlag,
		strconv.FormatUint(capMask(caps), 16),
		strconv.Itoa(tu.uid), strconv.Itoa(tu.gid), strings.Join(groups, ","),
		path)
	return append(out, argv...)
}

// runShim is the init mode: on one locked thread it drops the bounding set,
// switches user (keeping capabilities), sets the permitted, effective,
// inheritable and ambient sets, and execs the task. Failures are reported on
// descriptor 3, which is close-on-exec, so the executor reads EOF on success.
func runShim(args []string) int {
	report := os.NewFile(3, "shim-report")
	unix.CloseOnExec(3)
	fail := func(err error) int {
		_ = writeFrame(report, toWire(err))
		return 127
	}
	if len(args) < 6 {
		return fail(fmt.Errorf("%w: shim needs mask, uid, gid, groups, path, argv", ErrLaunch))
	}
	mask, err1 := strconv.ParseUint(args[0], 16, 64)
	uid, err2 := strconv.Atoi(args[1])
	gid, err3 := strconv.Atoi(args[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return fail(fmt.Errorf("%w: shim arguments: %w", ErrLaunch, err))
	}
	var groups []int
	if args[3] != "" {
		for g := range strings.SplitSeq(args[3], ",") {
			n, err := strconv.Atoi(g)
			if err != nil {
				return fail(fmt.Errorf("%w: shim groups: %w", ErrLaunch, err))
			}
			groups = append(groups, n)
		}
	}
	path, argv := args[4], args[5:]
	if err := applyCaps(capsFromMask(mask), uid, gid, groups); err != nil {
		return fail(fmt.Errorf("%w: %w", ErrLaunch, err))
	}
	err := syscall.Exec(path, argv, os.Environ())
	return fail(execErr(path, err))
}

// applyCaps must run on a locked thread that then execs: capability sets,
// the bounding set and (with raw syscalls) the credentials are per thread.
func applyCaps(caps []capability.Cap, uid, gid int, groups []int) error {
	runtime.LockOSThread() // never unlocked: the thread execs or the process exits
	if os.Geteuid() != 0 {
		return nil // an unprivileged executor can grant nothing; the task inherits its (empty) sets
	}
	ppid := os.Getppid()
	c, err := capability.NewPid2(0)
	if err != nil {
		return err
	}
	c.Clear(capability.CAPS | capability.BOUNDS | capability.AMBS)
	c.Set(capability.BOUNDING, caps...)
	if err := c.Apply(capability.BOUNDS); err != nil {
		return fmt.Errorf("drop bounding set: %w", err)
	}
	if uid >= 0 && uid != 0 {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("keepcaps: %w", err)
		}
		if err := unix.Setgroups(groups); err != nil { // a raw, per-thread syscall
			return fmt.Errorf("setgroups: %w", err)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("setresgid: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
		// A credential change clears the parent-death signal; set it again
		// and make sure the executor did not die meanwhile.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return fmt.Errorf("pdeathsig: %w", err)
		}
		if os.Getppid() != ppid {
			return errors.New("executor died during launch")
		}
	} else if uid == 0 && gid >= 0 {
		if err := unix.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("setresgid: %w", e)
		}
	}
	c.Set(capability.PERMITTED|capability.EFFECTIVE|capability.INHERITABLE, caps...)
	kind := capability.CAPS
	if uid > 0 {
		c.Set(capability.AMBIENT, caps...)
		kind |= capability.AMBS
	}
	if err := c.Apply(kind); err != nil {
		return fmt.Errorf("set capabilities: %w", err)
	}
	return nil
}
