//go:build linux

package server

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/cgroup"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/shim"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/internal/proc"
)

// launched is what startTask started.
type launched struct {
	pid      int
	start    uint64
	nsInit   bool // the task is pid 1 of a PID namespace of its own
	outs     []*output
	warnings []fsm.Warning
	join     joinPlan // how a command joins this run (see Exec)
}

// joinPlan is what a command started inside a run of the task joins: the
// run's shim config (cgroup, oom_score_adj, working directory, user,
// capabilities; no root to build), its namespaces (CLONE_NEW* flags; 0 for
// raw_exec) and its environment.
type joinPlan struct {
	cfg  shim.Config
	ns   int
	env  map[string]string
	pids int // the run's pids limit (0: none): an exec at it cannot start
}

// startTask starts the task as a child of the executor, in its own process
// group, through the init shim (see shimFlag): in the task's cgroup, which
// it creates first with the spec's limits; for exec in new namespaces and
// a root of its own. stdout and stderr go to pipes the executor copies into
// rotating log files. It returns once the shim has exec'd the task, or
// with the failure it reported (the shim reaped, the cgroup removed).
func (s *server) startTask(ls wire.Launch) (launched, error) {
	var l launched
	sb, err := s.checkLaunch(ls)
	if err != nil {
		return l, err
	}
	exec := ls.Driver == wire.ModeExec
	var tu spec.User
	tu, err = spec.UserOf(ls.Spec)
	if err != nil {
		return l, err
	}
	dirs := spec.DirsOf(ls.Spec, s.taskDir)
	if err := prepareTaskDirs(dirs, tu, exec); err != nil {
		return l, err
	}
	env := spec.TaskEnv(ls.Spec, dirs, tu.Home)
	maps.Copy(env, s.tmplEnv) // env = true templates' variables win, as in Nomad
	if ls.Readiness.Notify() {
		if err := s.openNotify(dirs, tu, exec); err != nil {
			return l, err
		}
		s.notifyEnv(env, ls.Watchdog)
	}
	cfg := shim.Config{UID: tu.UID, GID: tu.GID, Groups: tu.Groups, WatchdogPID: ls.Watchdog > 0}
	if ls.OOMScoreAdj != nil {
		cfg.OOMScoreAdj = *ls.OOMScoreAdj
	}
	sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// The namespaces a command started inside this run joins (see
	// Exec): those the task was cloned into, and its cgroup namespace.
	var joinNS int
	if exec {
		// A root task keeps Nomad's set; any other user holds only what
		// its cap_add names (TaskCaps).
		caps, err := spec.TaskCaps(ls.CapAdd, ls.CapDrop, ls.AllowedCaps, tu.UID == 0)
		if err != nil {
			return l, err
		}
		mask := spec.CapMask(caps)
		cfg.Caps = &mask
		if cfg.Root, err = shim.PlanRoot(s.taskDir, taskBinds(dirs), ls.Chroot); err != nil {
			return l, err
		}
		cfg.Path, cfg.Dir, cfg.Resolve = ls.Command, dirs.WorkDir(ls.Spec), true
		sys.Cloneflags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS
		if ls.PIDMode != wire.ModeHost {
			sys.Cloneflags |= unix.CLONE_NEWPID
			l.nsInit = true
		}
		if ls.IPCMode != wire.ModeHost {
			sys.Cloneflags |= unix.CLONE_NEWIPC
		}
		if sb.NetNS {
			sys.Cloneflags |= unix.CLONE_NEWNET
			cfg.Loopback = true
		}
		joinNS = int(sys.Cloneflags)
		if sb.CgroupNS {
			cfg.CgroupNS = true
			joinNS |= unix.CLONE_NEWCGROUP
		}
		cfg.Keyring = sb.Keyring
		if sb.Seccomp {
			if cfg.Seccomp, err = filterFor(ls.Seccomp, caps, ls.PIDMode == wire.ModeHost); err != nil {
				return l, err
			}
		}
		l.warnings = append(l.warnings, sandboxWarnings(sb, s.features())...)
	} else {
		dir := dirs.WorkDir(ls.Spec)
		cfg.Dir, cfg.TaskDir = dir, dirs.Task
		if tu.Set() {
			// The shim changes to the directory (beneath the task
			// directory, no link followed, when it is there) and looks
			// the command up as the task's user: nothing of a path the
			// task controls is touched with root's rights. And a task
			// run as another user gets a session keyring of its own, so
			// that it does not possess the operator's (where the host
			// has keyrings at all).
			cfg.Path, cfg.Resolve = ls.Command, true
			_, noKeys := s.features()[spec.FeatureKeyring]
			cfg.Keyring = !noKeys
		} else {
			if fi, err := os.Stat(dir); err != nil {
				return l, fmt.Errorf("%w: %w", wire.ErrWorkDir, err)
			} else if !fi.IsDir() {
				return l, fmt.Errorf("%w: %s is not a directory", wire.ErrWorkDir, dir)
			}
			if cfg.Path, err = spec.ResolveCommand(ls.Command, dir, env["PATH"]); err != nil {
				return l, err
			}
		}
	}

	// The cgroup, with its limits, before anything of the task exists.
	if s.loc.IsZero() {
		s.log.Warn("no cgroup for this task: it runs uncontained", "err", s.noCgroup)
		l.warnings = append(l.warnings, fsm.Warning{Kind: fsm.WarnUncontained,
			Text: fmt.Sprintf("no cgroup for this task, so it runs uncontained (a process it starts in a new session can outlive it): %v", s.noCgroup)})
	} else {
		cg, err := cgroup.Create(s.host, s.loc, spec.Limits(ls.Resources))
		if err != nil {
			var le *cgroup.LimitError
			if errors.As(err, &le) {
				return l, fmt.Errorf("%w: %w", wire.ErrLimit, err)
			}
			return l, fmt.Errorf("%w: create the task's cgroup: %w", wire.ErrLaunch, err)
		}
		s.cg = cg
		cfg.Cgroup = s.loc.String()
		l.warnings = append(l.warnings, spec.LimitWarnings(ls.Resources)...)
	}
	ok := false
	defer func() {
		if !ok {
			s.removeCgroup()
		}
	}()
	if err := s.reserve(); err != nil {
		s.log.Warn("could not reserve room for the exit status", "err", err)
	}

	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return l, fmt.Errorf("%w: %w", wire.ErrLaunch, err)
	}
	defer devnull.Close()
	outs, childEnds, warns, err := s.openOutputs(ls.Logs.WithDefaults(), tu, devnull, ls.Name)
	if err != nil {
		return l, err
	}
	l.warnings = append(l.warnings, warns...)
	defer func() {
		for _, f := range childEnds {
			if f != devnull {
				f.Close()
			}
		}
		if !ok {
			for _, o := range outs {
				o.abort()
			}
		}
	}()
	// started makes the process that runs the task this launch's.
	started := func(pid int, start uint64) (launched, error) {
		for _, o := range outs {
			o.start()
		}
		ok = true
		l.pid, l.start, l.outs = pid, start, outs
		l.join = joinPlan{cfg: cfg, ns: joinNS, env: env, pids: ls.Resources.PIDs}
		l.join.cfg.Root, l.join.cfg.Path, l.join.cfg.Resolve = nil, "", false
		l.join.cfg.CgroupNS, l.join.cfg.Loopback = false, false // joined through ns instead
		return l, nil
	}
	// Exec tasks go through the shim (namespaces, root, capabilities), and
	// so does a task with a user: the shim changes to the working directory
	// before it switches user, for a task directory the user cannot
	// traverse.
	if !exec && !tu.Set() && !cfg.WatchdogPID { // WATCHDOG_PID is the shim's to set: its pid is the task's
		// No parent-death signal for a raw_exec task: if the executor
		// dies, the task lives on in its cgroup, its descendants still
		// its own, until a recovery kills the whole tree by proven
		// identity (executor.Real.KillTask); a task killed with its
		// executor would hand its children to init, out of reach of
		// anything but its cgroup, which a root task can leave.
		direct := *sys
		direct.Pdeathsig = 0
		attr := &syscall.ProcAttr{Dir: cfg.Dir, Env: spec.EnvList(env), Sys: &direct,
			Files: []uintptr{devnull.Fd(), childEnds[0].Fd(), childEnds[1].Fd()}}
		pid, err := s.startDirectly(cfg, append([]string{ls.Command}, ls.Args...), attr)
		switch {
		case err == nil:
			start, err := proc.StartTime(pid) // our unreaped child: the pid cannot be reused yet
			if err != nil {
				_ = unix.Kill(pid, unix.SIGKILL)
				s.reapShim(pid)
				return l, fmt.Errorf("%w: %w", wire.ErrLaunch, err)
			}
			return started(pid, start)
		case errors.Is(err, cgroup.ErrThreadMove):
			if pid > 0 { // it dies with the thread that could not leave the cgroup
				_ = unix.Kill(pid, unix.SIGKILL)
				s.reapShim(pid)
			}
			s.log.Info("starting the task through the init shim", "why", err)
		default:
			return l, spec.ExecErr(cfg.Path, err)
		}
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return l, fmt.Errorf("%w: %w", wire.ErrLaunch, err)
	}
	defer errR.Close()
	defer errW.Close()
	files := []uintptr{devnull.Fd(), childEnds[0].Fd(), childEnds[1].Fd(), errW.Fd()}
	pid, err := s.startShim(cfg, append([]string{ls.Command}, ls.Args...), &syscall.ProcAttr{Dir: s.taskDir, Env: spec.EnvList(env), Files: files, Sys: sys})
	if err != nil {
		return l, err
	}
	start, serr := proc.StartTime(pid) // our unreaped child: the pid cannot be reused yet
	errW.Close()                       // or the read never sees EOF
	if err := shim.Result(errR); err != nil {
		if ws, ok := s.reapShim(pid); ok && errors.Is(err, shim.ErrDied) {
			err = fmt.Errorf("%w (%s)", err, exitOf(ws))
		}
		return l, err
	}
	if serr != nil {
		return l, fmt.Errorf("%w: %w", wire.ErrLaunch, serr)
	}
	return started(pid, start)
}

// startShim starts the init shim for cfg and the task's argv, born in the
// task's cgroup when it can be (cgroup.ForkExec: an executor thread moves
// itself alone into the v1 hierarchies and the child is cloned into the
// cgroup2 one), so that the shim need not join it: a whole process's
// migration waits for an RCU grace period per v1 hierarchy, which cost a
// shim 10 to 18 ms on a hybrid host of seven, more than the rest of its
// work. Where the thread cannot move (cgroup.ErrThreadMove: a pids limit
// of 1, a hierarchy of unknown own path), the shim joins the cgroup itself.
// (A command Exec starts joins the running task's cgroup itself: an
// executor thread inside a live task's cgroup would count among its
// members for a kill or the OOM killer.)
func (s *server) startShim(cfg shim.Config, argv []string, attr *syscall.ProcAttr) (int, error) {
	if s.cg != nil {
		born := cfg
		born.Cgroup = ""
		a, err := shim.Argv(s.prefix, born, argv)
		if err != nil {
			return 0, err
		}
		pid, err := s.cg.ForkExec(s.host, "/proc/self/exe", a, attr)
		if err == nil {
			return pid, nil
		}
		if !errors.Is(err, cgroup.ErrThreadMove) {
			return 0, fmt.Errorf("%w: start the init shim: %w", wire.ErrLaunch, err)
		}
		if pid > 0 { // it dies with the thread that could not leave the cgroup
			_ = unix.Kill(pid, unix.SIGKILL)
			s.reapShim(pid)
		}
		s.log.Info("the init shim joins the task's cgroup itself", "why", err)
	}
	a, err := shim.Argv(s.prefix, cfg, argv)
	if err != nil {
		return 0, err
	}
	pid, err := syscall.ForkExec("/proc/self/exe", a, attr)
	if err != nil {
		return 0, fmt.Errorf("%w: start the init shim: %w", wire.ErrLaunch, err)
	}
	return pid, nil
}

// checkLaunch is the check of a launch before anything is made for it:
// the spec's values (fsm.Spec.Validate) and what they mean on this host
// (spec.Check), and the sandbox it gets here.
func (s *server) checkLaunch(ls wire.Launch) (spec.Sandbox, error) {
	if err := ls.Spec.Validate(); err != nil {
		// ErrBadSpec wraps fsm.ErrInvalidSpec already: its text once.
		return spec.Sandbox{}, fmt.Errorf("%w: %s", wire.ErrBadSpec, strings.TrimPrefix(err.Error(), fsm.ErrInvalidSpec.Error()+": "))
	}
	sb, err := spec.Check(ls, s.host, s.noCgroup, s.features())
	if err != nil {
		return sb, err
	}
	if s.prefix == nil {
		return sb, fmt.Errorf("%w: the init shim needs Serve called with a tail of os.Args", wire.ErrLaunch)
	}
	return sb, nil
}

// startDirectly forks and execs a raw_exec task from the executor without
// the shim: contained from its first instruction by cgroup.ForkExec (or
// uncontained where there is no cgroup), with the task's oom_score_adj,
// which a child inherits, taken on by the executor for the fork only (a
// non-root executor could not lower its own again: then the shim sets
// the task's). cgroup.ErrThreadMove means the caller should use the shim
// instead.
func (s *server) startDirectly(cfg shim.Config, argv []string, attr *syscall.ProcAttr) (int, error) {
	own, err := cgroup.OOMScoreAdj(0)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", cgroup.ErrThreadMove, err)
	}
	if own != cfg.OOMScoreAdj && os.Geteuid() != 0 {
		return 0, fmt.Errorf("%w: oom_score_adj %d is not the executor's %d, which it could not take back", cgroup.ErrThreadMove, cfg.OOMScoreAdj, own)
	}
	if own != cfg.OOMScoreAdj {
		if err := cgroup.SetOOMScoreAdj(cfg.OOMScoreAdj); err != nil {
			return 0, fmt.Errorf("%w: %w", cgroup.ErrThreadMove, err)
		}
		defer func() {
			if err := cgroup.SetOOMScoreAdj(own); err != nil {
				s.log.Warn("could not restore the executor's oom_score_adj after the task's fork", "err", err)
			}
		}()
	}
	if s.cg == nil {
		return syscall.ForkExec(cfg.Path, argv, attr)
	}
	return s.cg.ForkExec(s.host, cfg.Path, argv, attr)
}

// reapShim kills and collects a shim that failed (it exits right after
// its report; one that gave none may hang), so that it has left the cgroup
// before the cgroup is removed. It is the executor's unreaped child, so
// its pid cannot have been reused.
func (s *server) reapShim(pid int) (unix.WaitStatus, bool) {
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if !errors.Is(err, unix.EINTR) {
			return ws, err == nil
		}
	}
}
