package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-fsm/tether/agent"
	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/executor"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
	"github.com/tether-fsm/tether/taskfile"
)

// A command runs against an agent.Service: the agent that serves the
// state directory when there is one (it holds the store, and its driver
// runs the command), else a driver and the store in this process
// (daemonless). Both run the same code (agent.Local), so a command prints
// and exits the same either way.
//
// Daemonless, the store is one bbolt file locked exclusively while open,
// reached through a store.Shared: the file (and its lock) is held only
// while a read or an append is in flight, never across a spawn, a launch,
// a stop's grace or a wait, so hundreds of commands at once share it (each
// waits at most --lock-timeout for the lock). No command reconciles every
// live task: a command reconciles the tasks it touches, and status those
// it lists whose executor is gone.

func (c *cli) dbPath() string { return c.layout().Store() }

func (c *cli) taskDir(id string) string { return c.layout().Task(id).Dir() }

func (c *cli) layout() statedir.Layout { return statedir.Layout{Dir: c.stateDir} }

func (c *cli) storeOptions() store.Options {
	return store.Options{LockTimeout: c.lockTimeout, Logger: c.log.Named("store"), Crash: c.hooks.StoreCrash()}
}

// executorCommand is the argv prefix that starts this binary in executor
// mode.
func executorCommand() ([]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find tether's own binary to serve as the executor: %w", err)
	}
	if self, err = filepath.Abs(self); err != nil {
		return nil, err
	}
	return []string{self, executorArg}, nil
}

// session is what a command runs against: an agent, or this process.
type session struct {
	svc agent.Service
	// agent is set when an agent serves the state directory; local when
	// the command runs daemonless.
	agent *agent.Client
	local *agent.Local
	close func() error
}

// Close lets go of the agent's connection, or closes the driver (tasks
// keep running) and the store.
func (s *session) Close() error { return s.close() }

// open returns the agent serving the state directory, or, when none does
// (no socket, or a dead one: at once), a session in this process. It
// reconciles nothing: commands reconcile the tasks they touch. An agent
// that does not answer is an error (agent.WedgedError), not a fallback:
// it holds the store. With --no-agent, an agent holding the store is an
// error at once.
func (c *cli) open() (*session, error) {
	ctx := context.Background()
	if c.noAgent {
		pid, held, err := agent.Holder(c.stateDir)
		if err != nil {
			return nil, err
		}
		if held {
			return nil, &agentHeldError{pid: pid, stateDir: c.stateDir}
		}
	} else {
		cl, err := agent.Dial(ctx, c.stateDir, agent.DialOptions{})
		switch {
		case err == nil:
			if err := errors.Join(c.checkPolicy(cl), c.checkArmed(cl)); err != nil {
				_ = cl.Close()
				return nil, err
			}
			return &session{svc: cl, agent: cl, close: cl.Close}, nil
		case !errors.Is(err, agent.ErrNoAgent):
			return nil, err
		}
	}
	if err := driver.PrepareStateDir(c.stateDir); err != nil {
		return nil, err
	}
	st, err := store.OpenShared(c.dbPath(), c.storeOptions())
	if err != nil {
		return nil, err
	}
	cmd, err := executorCommand()
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	d, err := driver.Open(driver.Config{
		StateDir:        c.stateDir,
		Store:           st,
		Logger:          c.log.Named("driver"),
		ExecutorCommand: cmd,
		AllowedCaps:     c.allowedCaps,
		ChrootEnv:       c.chroot,
		AllowSeccomp:    c.allowSeccomp,
		AllowMissing:    c.allowMissing,
		AllowRead:       c.allowRead,
		AllowDrivers:    c.allowDrivers, AllowHostNamespaces: c.allowHostNS,
		Hooks: c.hooks,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	l := &agent.Local{D: d, Store: st, StateDir: c.stateDir, ExecutorCommand: cmd, Logger: c.log,
		Hooks: c.hooks, ReleasePorts: c.releasePorts,
		Policy: job.Policy{AllowedCaps: c.allowedCaps, Chroot: c.chroot, AllowSeccomp: c.allowSeccomp, AllowMissing: c.allowMissing, AllowRead: c.allowRead,
			AllowDrivers: c.allowDrivers, AllowHostNamespaces: c.allowHostNS, MaxCount: c.maxCount},
		HandOff: func(alloc string, ids []string) error { return c.spawnGroupDriver(alloc, ids[0]) }}
	return &session{svc: l, local: l, close: func() error { return errors.Join(d.Close(), st.Close()) }}, nil
}

// agentHeldError is --no-agent refused: an agent holds the store.
type agentHeldError struct {
	pid      int
	stateDir string
}

func (e *agentHeldError) Error() string {
	who := "an agent"
	if e.pid > 0 {
		who = fmt.Sprintf("an agent (pid %d)", e.pid)
	}
	return fmt.Sprintf("--no-agent: %s serves %s and holds its store: drop --no-agent to go through it, or stop the agent first", who, e.stateDir)
}

func (e *agentHeldError) Unwrap() error { return agent.ErrAgentRunning }

// checkPolicy refuses the allow lists a command that starts tasks was given
// (flags or environment) when the agent's differ: the agent starts every
// task with its own, which a client cannot change, and running the task
// with other lists than asked (wider or narrower) would not be what was
// asked.
func (c *cli) checkPolicy(cl *agent.Client) error {
	if !c.command.startsTasks {
		return nil
	}
	p := cl.Policy()
	var errs []error
	if c.allowedCaps != nil {
		theirs := p.AllowedCaps
		if theirs == nil {
			theirs = executor.DefaultAllowedCaps
		}
		if !sameList(c.allowedCaps, theirs, capKey) {
			errs = append(errs, fmt.Errorf("%w: the agent (pid %d) serving %s starts every task with its own capability allow list, %s; --allow-caps %s (or TETHER_ALLOW_CAPS) cannot change it: leave it out, or restart the agent with that list",
				errAgentServes, cl.PID(), c.stateDir, strings.ToLower(strings.Join(theirs, ",")), strings.Join(c.allowedCaps, ",")))
		}
	}
	if c.chroot != nil {
		theirs := p.ChrootEnv
		if theirs == nil {
			theirs = executor.DefaultChroot
		}
		if !sameList(c.chroot, theirs, strings.TrimSpace) {
			errs = append(errs, fmt.Errorf("%w: the agent (pid %d) serving %s builds exec tasks' roots from its own chroot environment, %s; --chroot-env %s (or TETHER_CHROOT_ENV) cannot change it: leave it out, or restart the agent with it",
				errAgentServes, cl.PID(), c.stateDir, strings.Join(theirs, ","), strings.Join(c.chroot, ",")))
		}
	}
	agentDrivers := p.AllowDrivers
	if agentDrivers == nil {
		agentDrivers = job.DefaultDrivers
	}
	if c.maxCount != 0 && c.maxCount != cmp.Or(p.MaxCount, taskfile.DefaultMaxCount) {
		errs = append(errs, fmt.Errorf("%w: the agent (pid %d) serving %s reads every file with its own bound on count, %d; --max-count %d (or TETHER_MAX_COUNT) cannot change it: leave it out, or restart the agent with it",
			errAgentServes, cl.PID(), c.stateDir, cmp.Or(p.MaxCount, taskfile.DefaultMaxCount), c.maxCount))
	}
	for _, l := range []struct {
		flag, env    string
		ours, theirs []string
	}{
		{"--allow-seccomp", "TETHER_ALLOW_SECCOMP", c.allowSeccomp, p.AllowSeccomp},
		{"--allow-missing", "TETHER_ALLOW_MISSING", c.allowMissing, p.AllowMissing},
		{"--allow-read", "TETHER_ALLOW_READ", c.allowRead, p.AllowRead},
		{"--allow-drivers", "TETHER_ALLOW_DRIVERS", c.allowDrivers, agentDrivers},
		{"--allow-host-namespaces", "TETHER_ALLOW_HOST_NAMESPACES", c.allowHostNS, p.AllowHostNamespaces},
	} {
		if l.ours != nil && !sameList(l.ours, l.theirs, strings.TrimSpace) {
			theirs := strings.Join(l.theirs, ",")
			if theirs == "" {
				theirs = "none"
			}
			errs = append(errs, fmt.Errorf("%w: the agent (pid %d) serving %s applies its own %s to every task, %s; %s %s (or %s) cannot change it: leave it out, or restart the agent with it",
				errAgentServes, cl.PID(), c.stateDir, l.flag, theirs, l.flag, strings.Join(l.ours, ","), l.env))
		}
	}
	return errors.Join(errs...)
}

// checkArmed refuses a crash point or a fault armed in this process's
// environment while an agent serves: it would arm a driver (and its
// executors) that does not run here, and a test that believes it crashed
// something would have crashed nothing.
func (c *cli) checkArmed(cl *agent.Client) error {
	for _, v := range []string{driver.EnvCrashPoint, driver.EnvFault} {
		if p := os.Getenv(v); p != "" {
			return fmt.Errorf("%w: %s=%s arms the driver of the process that runs the command, and the agent (pid %d) runs it: give the variable to tether agent, or stop the agent and run the command daemonless",
				errAgentServes, v, p, cl.PID())
		}
	}
	return nil
}

// errAgentServes: what a command was given applies to a process that
// does not run it while an agent serves (allow lists, crash points).
var errAgentServes = errors.New("an agent serves this state directory")

// capKey is a capability's name as a list compares it: cap_net_raw and
// NET_RAW are one.
func capKey(s string) string {
	return strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "cap_")
}

// sameList reports whether a and b hold the same entries, by key.
func sameList(a, b []string, key func(string) string) bool {
	set := func(l []string) map[string]bool {
		m := map[string]bool{}
		for _, s := range l {
			m[key(s)] = true
		}
		return m
	}
	return maps.Equal(set(a), set(b))
}

// closeSession closes s, warning about a failure without changing the
// command's outcome.
func (c *cli) closeSession(s *session) {
	if err := s.Close(); err != nil {
		c.errorf("warning: closing the store: %v", err)
	}
}

// openTask opens a session and resolves arg (an id, or a name) to a task.
// When either fails it has said why and returns the command's exit code;
// else the caller closes the session (closeSession).
func (c *cli) openTask(ctx context.Context, arg string) (*session, driver.TaskInfo, int, bool) {
	s, err := c.open()
	if err != nil {
		return nil, driver.TaskInfo{}, c.fail(err), false
	}
	info, err := c.resolve(ctx, s, arg)
	if err != nil {
		c.closeSession(s)
		return nil, driver.TaskInfo{}, c.fail(err), false
	}
	return s, info, 0, true
}

// reconcileIfGone reconciles a task whose executor is gone (its end is not
// recorded yet) or whose executor restarted it while no driver watched
// (its restart journal holds entries the log lacks), and returns what it
// is now. A task some live process is driving is left to it.
func (c *cli) reconcileIfGone(ctx context.Context, s *session, info driver.TaskInfo) driver.TaskInfo {
	if !info.State.OwnsExecutor() || info.ExecutorAlive && info.Executor != nil && info.Unfolded == 0 {
		return info
	}
	rep, err := s.svc.Reconcile(ctx, info.ID)
	for _, r := range rep.Tasks {
		if r.Err != nil {
			c.errorf("warning: reconciling task %s: %v", r.ID, r.Err)
		} else if r.From != r.To {
			c.log.Info("reconciled from "+r.From.String()+": "+r.Action, "task_id", r.ID, "state", r.To.String())
		}
	}
	if err != nil && len(rep.Tasks) == 0 {
		c.errorf("warning: reconciling task %s: %v", info.ID, err)
	}
	if now, err := s.svc.InspectTask(ctx, info.ID); err == nil {
		return now
	}
	return info
}

// newTaskID makes a task id from a name and a short random suffix.
func newTaskID(name string) string { return job.NewTaskID(name) }

// lifecycle returns the states a task went through, from its events.
func lifecycle(events []fsm.Event) []fsm.State {
	var (
		t    fsm.Task
		path []fsm.State
	)
	for _, e := range events {
		next, err := fsm.Fold(t, e)
		if err != nil {
			break
		}
		t = next
		if len(path) == 0 || path[len(path)-1] != t.State {
			path = append(path, t.State)
		}
	}
	return path
}

func joinStates(states []fsm.State) string {
	parts := make([]string, len(states))
	for i, s := range states {
		parts[i] = s.String()
	}
	return strings.Join(parts, " -> ")
}
