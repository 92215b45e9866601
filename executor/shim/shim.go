//go:build linux

package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"
	"github.com/moby/sys/capability"
	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/seccomp"
	"github.com/tether-fsm/tether/taskdir"
)

// The init shim is this binary again, re-executed by the executor with
// Flag, between clone and the task's exec: every exec task, and every
// raw_exec task with a user, starts through it, so that nothing of the
// task runs before it is in its cgroup and sandbox. On one locked thread
// (creds, capabilities, keyrings and namespaces joined by unshare are the
// thread's, and the thread execs) it
//
//  1. joins the task's cgroup (every hierarchy) and, for exec, enters a
//     cgroup namespace rooted there;
//  2. sets oom_score_adj (0 unless the task sets it);
//  3. for exec, brings loopback up in the task's network namespace
//     (network "none"), builds the task's root and pivots into it (it was
//     cloned into new mount, PID, IPC and UTS namespaces);
//  4. for a raw_exec task whose working directory is in its task
//     directory, opens that directory as root beneath the task directory
//     (openat2, no symbolic link followed) and changes to it through the
//     descriptor: the user could not traverse the root-owned 0700 task
//     directory, and a link the task planted takes root nowhere;
//  5. for exec, joins a new anonymous session keyring; switches to the
//     task's user, sets its capability sets and no_new_privs;
//  6. changes to any other working directory, and looks the command up,
//     with the user's own rights;
//  7. installs the seccomp filter the executor compiled, the last step;
//  8. execs the task.
//
// It reports a failure, naming the step, on descriptor 3 (close-on-exec,
// so the executor reads EOF when the exec happened) and exits 127.
const Flag = "-shim"

// Shim steps, as a failure names them.
const (
	StepCgroup   = "join the task's cgroup"
	StepCgroupNS = "enter a cgroup namespace"
	StepOOMAdj   = "set oom_score_adj"
	StepNet      = "bring loopback up in the task's network namespace"
	StepRoot     = "build the task's root"
	StepDir      = "change to the working directory"
	StepKeyring  = "join a new session keyring"
	StepUser     = "switch to the task's user"
	StepCaps     = "set the task's capabilities"
	StepNNP      = "set no_new_privs"
	StepSeccomp  = "install the seccomp filter"
	StepExec     = "exec the task"
)

// Config is what the executor tells the shim, as one JSON argument.
type Config struct {
	// Path is the program: resolved by the executor, or, with Resolve,
	// the command the shim looks up in the task's PATH after the user
	// switch (exec: in the task's root; a raw_exec task with a user: from
	// its working directory).
	Path    string `json:"path"`
	Resolve bool   `json:"resolve,omitempty"`
	// Dir is the working directory (in the task's root, for exec).
	Dir string `json:"dir"`
	// TaskDir is the task's directory (root's, 0700) when Dir is below it
	// on the host (a raw_exec task): Dir is opened as root beneath it
	// without following a symbolic link. Any other Dir is changed to after
	// the user switch, with the user's own rights.
	TaskDir string `json:"task_dir,omitempty"`
	// Cgroup is the task cgroup's location; "" when there is none.
	Cgroup      string `json:"cgroup,omitempty"`
	OOMScoreAdj int    `json:"oom_score_adj"`
	// UID -1 keeps the executor's user.
	UID    int   `json:"uid"`
	GID    int   `json:"gid"`
	Groups []int `json:"groups,omitempty"`
	// Caps is the exec task's capability set as a mask; nil (raw_exec)
	// leaves the capabilities to the user switch.
	Caps *uint64 `json:"caps,omitempty"`
	// Root is the exec task's root; nil for raw_exec.
	Root *RootPlan `json:"root,omitempty"`
	// The exec task's sandbox beyond its namespaces and root (what
	// spec.Sandbox decided): a new anonymous session keyring, joined
	// before the user switch; a cgroup namespace, entered once in the
	// task's cgroup (the join mode enters the task's through NS instead);
	// loopback brought up in the network namespace it was cloned into;
	// and the seccomp filter, compiled by the executor for the task's
	// capabilities (seccomp.Filter's binary form), installed last.
	Keyring  bool   `json:"keyring,omitempty"`
	CgroupNS bool   `json:"cgroupns,omitempty"`
	Loopback bool   `json:"loopback,omitempty"`
	Seccomp  []byte `json:"seccomp,omitempty"`
	// WatchdogPID sets WATCHDOG_PID to the shim's own pid (as the task
	// sees it) before it execs the task, whose pid that becomes: the
	// sd_notify watchdog's variable, which nothing knows before the fork.
	WatchdogPID bool `json:"watchdog_pid,omitempty"`
}

// shimArgv builds the argv that re-executes this binary as the shim:
// prefix, shimFlag, the config, then the task's argv.
func Argv(prefix []string, cfg Config, argv []string) ([]string, error) {
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: encode the shim's config: %w", wire.ErrLaunch, err)
	}
	out := slices.Clone(prefix)
	out = append(out, Flag, string(b))
	return append(out, argv...), nil
}

// shimReport is a frame the shim writes on descriptor 3: Exec just before
// it execs the task, or Err when a step failed (also after Exec, when the
// exec itself failed).
type shimReport struct {
	Exec bool          `json:"exec,omitempty"`
	Err  *wire.Failure `json:"err,omitempty"`
}

// errShimDied is shimResult's verdict on a shim that died before it came
// to the exec (a Go runtime that could not start a thread under a tiny
// pids limit, a signal).
var ErrDied = errors.New("the init shim died before it could exec the task")

// shimResult waits for the shim's verdict: its Exec mark then EOF (the pipe
// is close-on-exec) means the exec happened; a failure frame says why it
// did not; EOF without the mark means the shim died on the way.
func Result(r *os.File) error {
	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	execd := false
	for {
		var rep shimReport
		err := wire.ReadFrame(r, &rep)
		switch {
		case err == nil && rep.Err != nil:
			return rep.Err.Err()
		case err == nil:
			execd = execd || rep.Exec
		case errors.Is(err, os.ErrDeadlineExceeded):
			return fmt.Errorf("%w: the init shim gave no verdict within 10s", wire.ErrLaunch)
		case execd:
			return nil // EOF after the mark: exec happened
		default:
			return fmt.Errorf("%w: %w (see the task's stderr log)", wire.ErrLaunch, ErrDied)
		}
	}
}

// Run is the init mode (see Flag).
func Run(args []string) int {
	report := os.NewFile(3, "shim-report")
	fail := func(e *stepError) int {
		_ = wire.WriteFrame(report, shimReport{Err: wire.FailureOf(fmt.Errorf("%w: %s: %w", wire.ErrLaunch, e.step, e.err))})
		return 127
	}
	var cfg Config
	argv, e := start(args, &cfg, 3)
	if e == nil {
		e = cfg.enter()
	}
	if e == nil && cfg.CgroupNS {
		// Once in the task's cgroup, so that it is the namespace's root.
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			e = &stepError{StepCgroupNS, err}
		}
	}
	if e == nil && cfg.Loopback {
		if err := loopbackUp(); err != nil {
			e = &stepError{StepNet, err}
		}
	}
	if e != nil {
		return fail(e)
	}
	if cfg.Root != nil {
		if err := cfg.Root.build(); err != nil {
			return fail(&stepError{StepRoot, err})
		}
	}
	beneath, e := cfg.chdirBeneath()
	if e != nil {
		return fail(e)
	}
	e = cfg.become(func() *stepError {
		// A credential change clears the parent-death signal: set it
		// again, then make sure the executor did not die meanwhile (in a
		// PID namespace of its own the shim cannot see its parent: the
		// report pipe's reader, the executor, tells).
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			return &stepError{StepUser, fmt.Errorf("pdeathsig: %w", err)}
		}
		if readerGone(3) {
			return &stepError{StepUser, errExecutorGone}
		}
		return nil
	})
	if e != nil && errors.Is(e.err, errExecutorGone) {
		return 127 // nobody to report to
	}
	if e != nil {
		return fail(e)
	}
	if !beneath {
		if e := cfg.chdir(); e != nil {
			return fail(e)
		}
	}
	path := cfg.Path
	if cfg.Resolve {
		var err error
		dir := cfg.Dir
		if beneath {
			dir = "." // the user may not traverse the task directory above it
		}
		if path, err = spec.ResolveCommand(cfg.Path, dir, os.Getenv("PATH")); err != nil {
			return fail(&stepError{StepExec, err})
		}
		if beneath && !filepath.IsAbs(path) {
			path = "./" + path // through the working directory, which the user may not reach by name
		}
	}
	if e := cfg.install(); e != nil {
		return fail(e)
	}
	if err := wire.WriteFrame(report, shimReport{Exec: true}); err != nil {
		return 127 // the executor is gone
	}
	if os.Getpid() != 1 {
		// The task outlives its executor until a recovery kills it,
		// whole: see executor/server's startDirectly. The init of a PID
		// namespace of its own keeps the signal: its death takes the
		// whole namespace with it.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); err != nil {
			return fail(&stepError{StepExec, fmt.Errorf("pdeathsig: %w", err)})
		}
	}
	if cfg.WatchdogPID {
		_ = os.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	}
	err := syscall.Exec(path, argv, os.Environ())
	return fail(&stepError{StepExec, spec.ExecErr(path, err)})
}

// errExecutorGone: the executor died while the shim set the task up.
var errExecutorGone = errors.New("the executor is gone")

// stepError is a step of a shim that failed, and why.
type stepError struct {
	step string
	err  error
}

// start is how both modes begin: their report descriptor (and any
// descriptor after it up to last) kept from the task, this goroutine
// locked to its thread for good (the thread execs, or the command
// inherits its attributes, or the process exits), the config of args[0]
// decoded into cfg; it returns the argv that follows.
func start(args []string, cfg any, last int) ([]string, *stepError) {
	for fd := 3; fd <= last; fd++ {
		unix.CloseOnExec(fd)
	}
	runtime.LockOSThread() // never unlocked
	if len(args) < 2 {
		return nil, &stepError{"start", errors.New("the shim needs its config and an argv")}
	}
	if err := json.Unmarshal([]byte(args[0]), cfg); err != nil {
		return nil, &stepError{"start", fmt.Errorf("the shim's config: %w", err)}
	}
	return args[1:], nil
}

// enter puts the shim in the run's cgroup with its oom_score_adj.
func (c *Config) enter() *stepError {
	if c.Cgroup != "" {
		if err := joinCgroup(c.Cgroup); err != nil {
			return &stepError{StepCgroup, err}
		}
	}
	if err := cgroup.SetOOMScoreAdj(c.OOMScoreAdj); err != nil {
		return &stepError{StepOOMAdj, err}
	}
	return nil
}

// chdirBeneath changes, as root, to a working directory below the task's
// directory (TaskDir), or to that directory itself, opened beneath it with openat2 without following a
// symbolic link on the way or at its end; it reports whether it did (for
// any other working directory it does nothing: chdir does it after the
// user switch).
func (c *Config) chdirBeneath() (bool, *stepError) {
	if c.TaskDir == "" {
		return false, nil
	}
	rel, ok := strings.CutPrefix(c.Dir, filepath.Clean(c.TaskDir)+"/")
	if !ok && filepath.Clean(c.Dir) == filepath.Clean(c.TaskDir) {
		// The task directory itself (a job file's raw_exec task starts
		// there): a user cannot reach it by its path, below the private
		// state directory.
		rel, ok = ".", true
	}
	if !ok {
		return false, nil
	}
	r, err := taskdir.OpenRoot(c.TaskDir)
	if err != nil {
		return false, &stepError{StepDir, fmt.Errorf("%w: %w", wire.ErrWorkDir, err)}
	}
	defer r.Close()
	d, err := r.OpenDir(rel)
	if err != nil {
		return false, &stepError{StepDir, fmt.Errorf("%w: %w", wire.ErrWorkDir, err)}
	}
	defer d.Close()
	if err := unix.Fchdir(int(d.Fd())); err != nil {
		return false, &stepError{StepDir, fmt.Errorf("%w: %s: %w", wire.ErrWorkDir, c.Dir, err)}
	}
	return true, nil
}

// chdir changes to the working directory after the user switch: with the
// user's own rights, so that a symbolic link on the way leads nowhere the
// user could not go itself.
func (c *Config) chdir() *stepError {
	if err := unix.Chdir(c.Dir); err != nil {
		return &stepError{StepDir, fmt.Errorf("%w: %s: %w", wire.ErrWorkDir, c.Dir, err)}
	}
	return nil
}

// install installs the seccomp filter the executor compiled, if any: the
// last step before the exec (it sets no_new_privs too).
func (c *Config) install() *stepError {
	if c.Seccomp == nil {
		return nil
	}
	var f seccomp.Filter
	if err := f.UnmarshalBinary(c.Seccomp); err != nil {
		return &stepError{StepSeccomp, err}
	}
	if err := f.Install(); err != nil {
		return &stepError{StepSeccomp, err}
	}
	return nil
}

// loopbackUp brings the loopback interface of the shim's network
// namespace up (a new namespace has it down): a task of network "none"
// has loopback alone.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// joinSessionKeyring makes the calling thread join a new anonymous
// session keyring (KEYCTL_JOIN_SESSION_KEYRING with a NULL name: every
// call makes a new one), so that nothing of the executor's session
// keyring (the operator's, inherited) reaches the task.
func joinSessionKeyring() error {
	_, _, e := unix.RawSyscall(unix.SYS_KEYCTL, unix.KEYCTL_JOIN_SESSION_KEYRING, 0, 0)
	if e != 0 {
		return fmt.Errorf("keyctl(KEYCTL_JOIN_SESSION_KEYRING): %w", e)
	}
	return nil
}

// become takes, for exec, a new session keyring, then the task's user
// and, for exec, its capabilities (the bounding set before the switch,
// the rest after) and no_new_privs, as the task got them. afterUser runs
// right after a user switch.
func (c *Config) become(afterUser func() *stepError) *stepError {
	if c.Keyring {
		if err := joinSessionKeyring(); err != nil {
			return &stepError{StepKeyring, err}
		}
	}
	var caps []capability.Cap
	if c.Caps != nil {
		caps = CapsFromMask(*c.Caps)
		if err := dropBounding(caps); err != nil {
			return &stepError{StepCaps, err}
		}
	}
	if err := switchUser(c.UID, c.GID, c.Groups, c.Caps != nil); err != nil {
		return &stepError{StepUser, err}
	}
	if c.UID >= 0 && afterUser != nil {
		if e := afterUser(); e != nil {
			return e
		}
	}
	if c.Caps != nil {
		if err := setCaps(caps, c.UID); err != nil {
			return &stepError{StepCaps, err}
		}
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return &stepError{StepNNP, err}
		}
	}
	return nil
}

// joinCgroup moves the shim into the cgroup at location loc.
func joinCgroup(loc string) error {
	l, err := cgroup.ParseLocation(loc)
	if err != nil {
		return err
	}
	h, err := cgroup.Probe()
	if err != nil {
		return err
	}
	cg, err := cgroup.Open(h, l)
	if err != nil {
		return err
	}
	return cg.Join()
}

// readerGone reports whether the read end of the pipe at fd was closed
// (the executor died).
func readerGone(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&unix.POLLERR != 0
	}
}

// dropBounding limits the bounding set to caps (before the user switch: it
// needs CAP_SETPCAP).
func dropBounding(caps []capability.Cap) error {
	if os.Geteuid() != 0 {
		return errors.New("an unprivileged executor cannot set capabilities")
	}
	c, err := capability.NewPid2(0)
	if err != nil {
		return err
	}
	c.Clear(capability.BOUNDS)
	c.Set(capability.BOUNDING, caps...)
	if err := c.Apply(capability.BOUNDS); err != nil {
		return fmt.Errorf("drop the bounding set: %w", err)
	}
	return nil
}

// switchUser sets the groups, gid and uid of this thread (raw, per-thread
// syscalls: the thread then execs). keepCaps keeps the permitted set
// across a switch away from root, for setCaps. uid -1 changes nothing; uid
// 0 sets only the groups and gid.
func switchUser(uid, gid int, groups []int, keepCaps bool) error {
	if uid < 0 {
		return nil
	}
	if uid != 0 && keepCaps {
		if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("keepcaps: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		if err := unix.Setgroups(groups); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
	}
	if gid >= 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
			return fmt.Errorf("setresgid %d: %w", gid, e)
		}
	}
	if uid != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
			return fmt.Errorf("setresuid %d: %w", uid, e)
		}
	}
	return nil
}

// setCaps sets the permitted, effective and inheritable sets to caps, and
// for a non-root task the ambient set too, so that they survive its exec.
func setCaps(caps []capability.Cap, uid int) error {
	c, err := capability.NewPid2(0)
	if err != nil {
		return err
	}
	c.Clear(capability.CAPS | capability.AMBS)
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

// Join mode: the init shim again, re-executed by the executor with
// JoinFlag, starts a command inside the task's running run (see exec.go).
// Its descriptors 0, 1 and 2 are the command's stdio, pipes the executor
// made (without a terminal; never a descriptor of the caller's), 3 the
// report socket (a datagram socket: one report, with the terminal's
// master when there is one), and 4, for an exec task, a pidfd of the
// task. On one locked thread, whose attributes the command inherits, it
//
//  1. joins the task's cgroup and sets its oom_score_adj;
//  2. joins the task's namespaces through the pidfd (setns with the
//     task's CLONE_NEW* flags, its cgroup and network namespaces
//     included, after unshare(CLONE_FS) so that the mount namespace may
//     be joined), which puts the thread in the task's root and makes its
//     children members of the task's PID namespace;
//  3. for a raw_exec task, changes to its working directory below its
//     task directory as root, through openat2 (see Run);
//  4. takes a new session keyring, the task's user, capabilities and
//     no_new_privs as the task got them;
//  5. opens the terminal, when asked, as the task's user, inside the
//     task's root (its own devpts);
//  6. changes to any other working directory, and looks the command up,
//     as the user;
//  7. installs the task's seccomp filter;
//  8. starts the command as the executor's child (CLONE_PARENT: the
//     executor reaps and supervises it, and it is not a child of this
//     shim, which exits), in a new session (on the terminal as its
//     controlling terminal);
//  9. reports the command's pid, in the host's PID namespace, and exits.
//
// The shim runs the command without exec'ing itself inside the task's
// root, where its own binary is not visible.
const JoinFlag = "-join"

// Join steps, as a failure names them.
const (
	StepJoinNS  = "join the task's namespaces"
	StepTTY     = "open a terminal in the task"
	StepCommand = "start the command"
)

// joinConfig is what the executor tells the join shim: the run's shim
// config (no root, no path) and what to join.
type JoinConfig struct {
	Config
	// NS are the CLONE_NEW* flags of the task's namespaces to join
	// through the pidfd on descriptor 4; 0 joins none (raw_exec).
	NS int `json:"ns,omitempty"`
	// Env is the command's environment. It travels as the shim's own
	// environment, never in its arguments: /proc/PID/cmdline is anyone's
	// to read, environ only its owner's (the task's variables may be
	// secrets, and another user's task on the host could read them).
	Env  []string `json:"-"`
	TTY  bool     `json:"tty,omitempty"`
	Rows uint16   `json:"rows,omitempty"`
	Cols uint16   `json:"cols,omitempty"`
}

// joinReport is the join shim's one report: the command's pid, or why it
// did not start.
type JoinReport struct {
	PID int           `json:"pid,omitempty"`
	Err *wire.Failure `json:"err,omitempty"`
}

// RunJoin is the join mode (see JoinFlag).
func RunJoin(args []string) int {
	fail := func(e *stepError) int {
		b, _ := json.Marshal(JoinReport{Err: wire.FailureOf(fmt.Errorf("%w: %s: %w", wire.ErrExec, e.step, e.err))})
		_ = unix.Sendmsg(3, b, nil, nil, 0)
		return 127
	}
	var cfg JoinConfig
	argv, e := start(args, &cfg, 4)
	cfg.Env = os.Environ() // the command's, as the executor started this shim with it
	if e == nil {
		e = cfg.enter()
	}
	if e != nil {
		return fail(e)
	}
	if cfg.NS != 0 {
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			return fail(&stepError{StepJoinNS, fmt.Errorf("unshare(CLONE_FS): %w", err)})
		}
		if err := unix.Setns(4, cfg.NS); err != nil {
			return fail(&stepError{StepJoinNS, fmt.Errorf("setns through the task's pidfd: %w", err)})
		}
		unix.Close(4)
	}
	beneath, e := cfg.chdirBeneath()
	if e != nil {
		return fail(e)
	}
	if e := cfg.become(nil); e != nil {
		return fail(e)
	}
	stdio := []uintptr{0, 1, 2}
	var rights []byte
	if cfg.TTY {
		// As the task's user (or its root, for a root task), in the
		// task's root: its own devpts makes the terminal the user's.
		master, tty, err := pty.Open()
		if err != nil {
			return fail(&stepError{StepTTY, err})
		}
		if cfg.Rows > 0 && cfg.Cols > 0 {
			if err := pty.Setsize(tty, &pty.Winsize{Rows: cfg.Rows, Cols: cfg.Cols}); err != nil {
				return fail(&stepError{StepTTY, err})
			}
		}
		fd := tty.Fd()
		stdio = []uintptr{fd, fd, fd}
		rights = unix.UnixRights(int(master.Fd()))
	}
	if !beneath {
		if e := cfg.chdir(); e != nil {
			return fail(e)
		}
	}
	var pathEnv string
	for _, kv := range cfg.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	// Relative to the working directory: a task user may not traverse
	// the task directory above it.
	path, err := spec.ResolveCommand(argv[0], ".", pathEnv)
	if err != nil {
		return fail(&stepError{StepCommand, err})
	}
	if !filepath.IsAbs(path) && !strings.HasPrefix(path, "./") {
		path = "./" + path
	}
	if e := cfg.install(); e != nil {
		return fail(e)
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   cfg.Env,
		Files: stdio,
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: cfg.TTY, Ctty: 0, Cloneflags: unix.CLONE_PARENT},
	})
	if err != nil {
		return fail(&stepError{StepCommand, spec.ExecErr(path, err)})
	}
	b, err := json.Marshal(JoinReport{PID: pid})
	if err == nil {
		err = unix.Sendmsg(3, b, rights, nil, 0)
	}
	if err != nil {
		// The executor is gone, or cannot hear of the command: it must
		// not run unsupervised.
		_ = unix.Kill(pid, unix.SIGKILL)
		return 127
	}
	return 0
}
