package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// TaskReport says what a reconciliation did with one task.
type TaskReport struct {
	ID     string
	From   fsm.State // the state the log held
	To     fsm.State // the state after reconciliation
	Action string
	Err    error
}

// Report is what Recover or Reconcile did, one entry per task, sorted by id.
type Report struct {
	Tasks []TaskReport
}

// Recover reconciles every live task in the store with the process table:
// Reconcile of every live task. Call it once after opening a driver on a
// state directory that a crashed driver used.
func (d *Driver) Recover(ctx context.Context) (Report, error) {
	ids, err := d.Tasks(ctx, false)
	if err != nil {
		return Report{}, err
	}
	return d.Reconcile(ctx, ids...)
}

// Reconcile replays the given tasks from the store and reconciles each with
// reality, as the crash-window table of docs/DESIGN.md says (see
// owner.reconcile):
//
//	created        nothing was spawned: start-interrupted, failed
//	spawning       start-interrupted; the executor found by nonce is killed
//	executor-up    start-interrupted; the executor is killed (Nomad's leak)
//	launching      reattach and ask: launched -> supervise; else killed
//	launched,      reattach with the identity check and supervise; or
//	running,       collect the exit status left on disk (if it matches the
//	restarting     log); or kill everything of the task, lost
//	reaping        kill again by identity, confirm dead, record reaped
//
// Reconciliation is an input to each task's owner like any other, so it is
// safe beside live calls on the same driver: a task this driver (or another
// live process) is starting, stopping or supervising is left to it, and a
// start in progress is never failed. It is idempotent and crash-safe:
// every step is a durable append, so a reconciliation interrupted anywhere
// is finished by the next one. Tasks are reconciled concurrently.
func (d *Driver) Reconcile(ctx context.Context, ids ...string) (Report, error) {
	var (
		mu  sync.Mutex
		rep Report
		wg  sync.WaitGroup
	)
	sem := make(chan struct{}, 64)
	for _, id := range ids {
		if err := ctx.Err(); err != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := d.reconcileOne(ctx, id)
			mu.Lock()
			rep.Tasks = append(rep.Tasks, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(rep.Tasks, func(i, j int) bool { return rep.Tasks[i].ID < rep.Tasks[j].ID })
	var errs []error
	for _, r := range rep.Tasks {
		if r.Err != nil {
			errs = append(errs, r.Err)
		}
	}
	if err := ctx.Err(); err != nil {
		errs = append(errs, err)
	}
	return rep, errors.Join(errs...)
}

func (d *Driver) reconcileOne(ctx context.Context, id string) TaskReport {
	r, err := d.ask(ctx, id, request{kind: inRecover})
	if err != nil {
		return TaskReport{ID: id, From: r.task.State, To: r.task.State, Err: err}
	}
	if r.err != nil {
		return TaskReport{ID: id, From: r.task.State, To: r.task.State, Err: r.err}
	}
	return r.report
}

// LockRecovery takes the state directory's recovery lock
// (statedir.Layout.RecoverLock), held for the length of a recovery of
// every live task, so that one runs at a time: a second Recover in
// another process would find the tasks locked by the first and leave them
// to it, and say nothing of what became of them. When another process
// holds it, busy is called with that process's pid (0 if unknown) before
// the wait, which ends when the holder lets go (its process ends, at the
// latest) or ctx ends. The lock file names its holder's pid.
func LockRecovery(ctx context.Context, stateDir string, busy func(holder int)) (release func(), err error) {
	path := statedir.Layout{Dir: stateDir}.RecoverLock()
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("driver: recovery lock: %w", err)
	}
	fd := int(f.Fd())
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		holder := 0
		if b, rerr := os.ReadFile(path); rerr == nil {
			holder, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		busy(holder)
		got := make(chan error, 1)
		go func() {
			for {
				err := unix.Flock(fd, unix.LOCK_EX)
				if !errors.Is(err, unix.EINTR) {
					got <- err
					return
				}
			}
		}()
		select {
		case err = <-got:
		case <-ctx.Done():
			go func() { // owns f from here: lets go of whatever it gets
				if <-got == nil {
					_ = unix.Flock(fd, unix.LOCK_UN)
				}
				f.Close()
			}()
			return nil, ctx.Err()
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("driver: recovery lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = unix.Flock(fd, unix.LOCK_UN)
		f.Close()
	}, nil
}
