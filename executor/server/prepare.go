//go:build linux

package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
)

// Preparation.
//
// A task of a job file may have artifacts to fetch and templates to render
// before it starts. The executor has them prepared (by its Preparer:
// package executor/prepare) before the task's first launch, after the
// task's directories exist and before its cgroup: a failure is a failed
// launch naming the source or the template (ErrArtifact, ErrTemplate),
// with nothing of the task started. Preparation runs in a goroutine of its
// own, so that the executor's loop still answers meanwhile: a shutdown or
// the loss of its lease cancels it (a download may take minutes).
//
// A failed artifact fetch is a recoverable failure, as Nomad's artifact
// hook makes it: with a restart policy, the executor asks the policy (as
// for a run that failed: it counts in the policy's interval, and waits its
// delay) and tries the preparation again, until it succeeds or the policy
// gives up (then the launch fails, saying how many tries there were). An
// artifact a sidecar of the group serves, not up yet at the first try, is
// fetched at a later one. The tries are no runs: the log numbers no
// restart for them (its restarts are the runs'); the launch's warnings
// say that earlier tries failed, and the policy's interval and count go on
// into the task's runs. Without a restart policy a failure fails the
// launch at once; a template that cannot be rendered does too.
//
// A relaunch (a restart) prepares nothing again: the files stay, as
// Nomad's do across restarts. While the task runs, the Preparer re-renders
// a template when a file it read changes, and the executor applies its
// change_mode: restart through a journalled restart (see restart.go),
// signal through the task's group (pidfds), noop logs.

// Preparer prepares a task before its first launch (fetches its
// artifacts, renders its templates) in dirs, which exist. Its errors are
// ErrArtifact or ErrTemplate naming what failed.
type Preparer interface {
	Prepare(ctx context.Context, log hclog.Logger, ls wire.Launch, dirs spec.Dirs) (Prepared, error)
}

// Prepared is what a preparation left.
type Prepared interface {
	// Env is the environment the env = true templates give the task (it
	// wins over its env, as in Nomad).
	Env() map[string]string
	// Watch reports each template whose output changed after a file it
	// read changed, until ctx ends; nil when nothing can change.
	Watch(ctx context.Context) (<-chan Change, error)
}

// Change is a re-rendered template whose output changed: what its
// change_mode does to the running task.
type Change struct {
	Template string // its name, for the log
	Mode     fsm.ChangeMode
	Signal   syscall.Signal
	// Env is an env = true template's variables now.
	Env map[string]string
	// Err is a re-render (or the watch) that failed: the previous output
	// stays and Mode does not apply.
	Err error
}

// preparation is a preparation in flight and the launch requests that wait
// for it.
type preparation struct {
	launch  wire.Launch
	cancel  context.CancelFunc
	waiters []waiter
}

// prepared is a preparation's outcome, as the loop receives it: with the
// restart policy's state after the failed tries (failed of them, the last
// failure's error), for the task's runs to go on from.
type prepared struct {
	p      Prepared
	err    error
	state  fsm.RestartState
	failed int
	last   error
}

// needsPreparation reports whether a launch has artifacts or templates.
func needsPreparation(ls wire.Launch) bool { return len(ls.Artifacts)+len(ls.Templates) > 0 }

// startPreparing begins the preparation of a launch asked by (sc, id).
func (s *server) startPreparing(sc *sconn, id uint64, ls wire.Launch) {
	ctx, cancel := context.WithCancel(context.Background())
	s.preparing = &preparation{launch: ls, cancel: cancel, waiters: []waiter{{sc, id}}}
	log, private, preparer := s.log, s.taskDir, s.preparer
	go func() {
		var out prepared
		tu, err := spec.UserOf(ls.Spec)
		dirs := spec.DirsOf(ls.Spec, private)
		if err == nil {
			err = prepareTaskDirs(dirs, tu, ls.Driver == wire.ModeExec)
		}
		out.state = fsm.RestartState{WindowStart: time.Now().UnixNano()}
		for err == nil {
			if out.p, err = preparer.Prepare(ctx, log, ls, dirs); err == nil || !errors.Is(err, wire.ErrArtifact) || wire.IsDefinite(err) || ls.Restart == nil || ctx.Err() != nil {
				// Only a fetch that may go otherwise is tried again: a
				// getter tether does not have fails the same way every time.
				break
			}
			// A failed fetch: the policy decides, as for a failed run.
			next, d := ls.Restart.Next(out.state, fsm.ExitStatus{Code: 1}, time.Now().UnixNano())
			next.Attempts = out.state.Attempts // a try is no run: the log numbers none
			out.state, out.failed, out.last = next, out.failed+1, err
			if !d.Restart {
				err = fmt.Errorf("%w (try %d; the restart policy tries no more: %s)", err, out.failed, d.Reason)
				break
			}
			log.Warn("fetching an artifact failed; trying again under the restart policy", "err", err, "try", out.failed, "delay", d.Delay, "reason", d.Reason)
			t := time.NewTimer(d.Delay)
			select {
			case <-t.C:
				err = nil
			case <-ctx.Done():
				t.Stop()
				err = fmt.Errorf("%w: preparation cancelled between tries: %w", wire.ErrLaunch, ctx.Err())
			}
		}
		out.err = err
		if cerr := ctx.Err(); cerr != nil && out.err == nil {
			out.err = fmt.Errorf("%w: preparation cancelled: %w", wire.ErrLaunch, cerr)
		}
		select {
		case s.preparedC <- out:
		case <-s.quit:
		}
	}()
}

// cancelPreparing cancels a preparation in flight (a shutdown before the
// launch, the lease lost); its waiters are answered when it comes back.
func (s *server) cancelPreparing() {
	if s.preparing != nil {
		s.preparing.cancel()
	}
}

// finishPreparing takes a preparation's outcome: the launch it was for
// goes on, or fails naming what could not be prepared.
func (s *server) finishPreparing(p prepared) {
	pr := s.preparing
	s.preparing = nil
	pr.cancel()
	if p.err == nil && s.ending != endNone {
		p.err = fmt.Errorf("%w: stopped before the launch", wire.ErrLaunch)
	}
	if p.err != nil {
		s.log.Warn("preparation failed", "err", p.err)
		for _, w := range pr.waiters {
			s.send(w.c, wire.Response{ID: w.id, Err: wire.FailureOf(p.err)})
		}
		if s.ending == endShutdown || s.lease == leaseWaiting || s.helloCount() == 0 {
			s.finish(0)
		}
		return
	}
	s.prep = p.p
	s.tmplEnv = p.p.Env()
	s.prepState = &p.state
	if p.failed > 0 {
		s.prepWarnings = []fsm.Warning{{Kind: fsm.WarnOther, Text: fmt.Sprintf(
			"the artifacts were fetched at try %d, after %d that failed (tried again under the restart policy); the last: %v", p.failed+1, p.failed, p.last)}}
	}
	first := pr.waiters[0]
	s.launch(first.c, first.id, pr.launch)
	for _, w := range pr.waiters[1:] {
		st := s.status()
		s.send(w.c, wire.Response{ID: w.id, Status: &st})
	}
}

// watchTemplates starts the re-rendering of the task's templates when
// the files they read change, once the task has launched.
func (s *server) watchTemplates() {
	if s.prep == nil || s.changes != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	changes, err := s.prep.Watch(ctx)
	if err != nil || changes == nil {
		cancel()
		if err != nil {
			s.log.Warn("templates will not be re-rendered: cannot watch what they read", "err", err)
		}
		return
	}
	s.watchStop, s.changes = cancel, changes
}

// templateChanged applies a re-rendered template's change_mode to the
// running task.
func (s *server) templateChanged(c Change) {
	if c.Err != nil {
		s.log.Warn("a template could not be rendered again; the previous output stays", "template", c.Template, "err", c.Err)
		return
	}
	if c.Env != nil {
		env := maps.Clone(s.tmplEnv)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, c.Env)
		s.tmplEnv = env
	}
	switch c.Mode {
	case fsm.ChangeNoop, fsm.ChangeScript:
		s.log.Info("a template changed; its change_mode leaves the task alone", "template", c.Template, "mode", c.Mode.String())
	case fsm.ChangeSignal:
		if s.checkRunning() != nil {
			s.log.Info("a template changed while the task is not running; no signal sent", "template", c.Template)
			return
		}
		s.log.Info("a template changed: signalling the task", "template", c.Template, "signal", c.Signal)
		s.signalGroup(c.Signal)
	case fsm.ChangeRestart:
		s.forceRestart(fmt.Sprintf("%s changed (change_mode restart)", c.Template))
	}
}

// stopWatching ends the template watch.
func (s *server) stopWatching() {
	if s.watchStop != nil {
		s.watchStop()
		s.watchStop = nil
	}
	s.changes = nil
}
