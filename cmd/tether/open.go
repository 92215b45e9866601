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
	"github.com/tether-fsm/tether/store"
)

// The store is one bbolt file locked exclusively while open, so every
// command opens it for as short a time as it can and never holds it while
// it waits for a task: a second tether waits up to --lock-timeout for it.

func (c *cli) dbPath() string { return filepath.Join(c.stateDir, "tether.db") }

func (c *cli) taskDir(id string) string { return filepath.Join(c.stateDir, "tasks", id) }

func (c *cli) storeOptions() store.Options {
	return store.Options{LockTimeout: c.lockTimeout, Logger: c.log.Named("store")}
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

// session is an open driver and its store.
type session struct {
	d  *driver.Driver
	st *store.Store
}

func (s *session) Close() error {
	return errors.Join(s.d.Close(), s.st.Close())
}

// open opens the store and a driver on it and runs Recover, so that what
// the command sees is the truth (a task whose executor died is recorded as
// such). Recovery problems are reported as warnings: they concern other
// tasks and the next command retries them.
func (c *cli) open(ctx context.Context) (*session, error) {
	s, err := c.openNoRecover()
	if err != nil {
		return nil, err
	}
	rep, err := s.d.Recover(ctx)
	if err != nil {
		for _, t := range rep.Tasks {
			if t.Err != nil {
				c.errorf("warning: recovering task %s: %v (the next tether command retries; 'tether recover' shows details)", t.ID, t.Err)
			}
		}
		if len(rep.Tasks) == 0 {
			_ = s.Close()
			return nil, fmt.Errorf("recover: %w", err)
		}
	}
	for _, t := range rep.Tasks {
		if t.Err == nil && t.From != t.To {
			c.log.Info("recovered task from "+t.From.String()+": "+t.Action, "task_id", t.ID, "state", t.To.String())
		}
	}
	return s, nil
}

func (c *cli) openNoRecover() (*session, error) {
	if err := os.MkdirAll(c.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("state directory: %w", err)
	}
	st, err := store.Open(c.dbPath(), c.storeOptions())
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
		Hooks:           c.hooks,
	})
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	return &session{d: d, st: st}, nil
}

// world is the process world for waiting on a task without the store.
func (c *cli) world() (driver.Executors, error) {
	cmd, err := executorCommand()
	if err != nil {
		return nil, err
	}
	return driver.NewReal(c.stateDir, cmd, c.log.Named("driver")), nil
}

// errAmbiguous: a name given for an id matches several tasks.
var errAmbiguous = errors.New("ambiguous task name")

// resolve turns an id or a task name into a task id. A name is accepted
// while it is unique among all the tasks in the store.
// lookup opens the store (recovering first), resolves one task by id or
// name, and closes the store again: the caller may then wait on the task
// without holding the store.
func (c *cli) lookup(ctx context.Context, arg string) (driver.TaskInfo, error) {
	s, err := c.open(ctx)
	if err != nil {
		return driver.TaskInfo{}, err
	}
	info, err := c.resolve(ctx, s.d, arg)
	if cerr := s.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return info, err
}

func (c *cli) resolve(ctx context.Context, d *driver.Driver, arg string) (driver.TaskInfo, error) {
	if arg == "" {
		return driver.TaskInfo{}, errors.New("no task id given")
	}
	if driver.ValidateTaskID(arg) == nil {
		info, err := d.InspectTask(ctx, arg)
		if err == nil || !errors.Is(err, driver.ErrUnknownTask) {
			return info, err
		}
	}
	ids, err := d.Tasks(ctx, true)
	if err != nil {
		return driver.TaskInfo{}, err
	}
	var matches []driver.TaskInfo
	for _, id := range ids {
		info, err := d.InspectTask(ctx, id)
		if err != nil {
			return driver.TaskInfo{}, err
		}
		if info.Spec != nil && info.Spec.Name == arg {
			matches = append(matches, info)
		}
	}
	switch len(matches) {
	case 0:
		return driver.TaskInfo{}, fmt.Errorf("%w: no task has the id or name %q", driver.ErrUnknownTask, arg)
	case 1:
		return matches[0], nil
	}
	var list []string
	for _, m := range matches {
		list = append(list, fmt.Sprintf("%s (%s)", m.ID, m.State))
	}
	return driver.TaskInfo{}, fmt.Errorf("%w: %d tasks are named %q: %s; use an id", errAmbiguous, len(matches), arg, strings.Join(list, ", "))
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
	base := strings.TrimLeft(b.String(), "._-")
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
