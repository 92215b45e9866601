package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
	"github.com/tether-fsm/tether/store"
)

// The store is one bbolt file locked exclusively while open. Every command
// goes through a store.Shared: the file (and its lock) is held only while a
// read or an append is in flight, never across a spawn, a launch, a stop's
// grace or a wait, so hundreds of commands at once share it (each waits at
// most --lock-timeout for the lock). No command reconciles every live task:
// a command reconciles the tasks it touches, and status those it lists
// whose executor is gone.

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

// session is a driver on the state directory and its shared store.
type session struct {
	d  *driver.Driver
	st *store.Shared
}

// Close closes the driver (tasks keep running) and the store.
func (s *session) Close() error {
	return errors.Join(s.d.Close(), s.st.Close())
}

// open opens a session. It reconciles nothing: commands reconcile the
// tasks they touch.
func (c *cli) open() (*session, error) {
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
		Hooks:           c.hooks,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &session{d: d, st: st}, nil
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
	rep, err := s.d.Reconcile(ctx, info.ID)
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
	if now, err := s.d.InspectTask(ctx, info.ID); err == nil {
		return now
	}
	return info
}

// newTaskID makes a task id from a name and a short random suffix.
func newTaskID(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	base := strings.Trim(b.String(), "._-")
	if len(base) > 50 {
		base = base[:50]
	}
	if base == "" {
		base = "task"
	}
	var suffix [3]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand does not fail on Linux
	return base + "-" + hex.EncodeToString(suffix[:])
}

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
