//go:build linux

package server

import (
	"context"
	"fmt"
	"maps"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/template"
)

// Preparation.
//
// A task of a job file may have artifacts to fetch and templates to render
// before it starts. The executor does both before the task's first launch,
// in Nomad's order (artifacts, then templates, so that a template may read
// what an artifact placed), after the task's directories exist and before
// its cgroup: a failure is a failed launch naming the source or the
// template (ErrArtifact, ErrTemplate), with nothing of the task started.
// Preparation runs in a goroutine of its own, so that the executor's loop
// still answers meanwhile: a stop, a shutdown or the loss of its lease
// cancels it (a download may take minutes). It runs as root, and writes
// only through taskdir.Root (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS)
// below the task and alloc directories, owned by the task's user; reads of
// the task's own files as root are refused for a file with several links
// the task's user does not own (taskdir.Root.ReadFileAs).
//
// A relaunch (a restart) prepares nothing again: the files stay, as
// Nomad's do across restarts. While the task runs, a template.Watcher
// re-renders a template when a file it read changes, and the executor
// applies its change_mode: restart through a journalled restart (see
// restart.go), signal through the task's group (pidfds), noop logs.

// prepared is what a preparation left for the launch: the environment the
// env = true templates give, and what a Watcher needs.
type prepared struct {
	env      map[string]string
	renderer *template.Renderer
	results  []template.Result
	err      error
}

// preparation is a preparation in flight and the launch requests that wait
// for it.
type preparation struct {
	launch  wire.Launch
	cancel  context.CancelFunc
	waiters []waiter
}

// needsPreparation reports whether a launch has artifacts or templates.
func needsPreparation(ls wire.Launch) bool { return len(ls.Artifacts)+len(ls.Templates) > 0 }

// layoutOf is the task's directories as packages template and artifact
// resolve a path the task names.
func layoutOf(dirs spec.Dirs, exec bool) taskdir.Layout {
	return taskdir.Layout{TaskDir: dirs.Task, AllocDir: dirs.Alloc, Chroot: exec}
}

// prepare makes the task's directories, fetches its artifacts and renders
// its templates. It runs in a goroutine; it touches nothing of the server.
func prepare(ctx context.Context, log hclog.Logger, ls wire.Launch, private string) prepared {
	exec := ls.Driver == wire.ModeExec
	tu, err := spec.UserOf(ls.Spec)
	if err != nil {
		return prepared{err: err}
	}
	dirs := spec.DirsOf(ls.Spec, private)
	if err := prepareTaskDirs(dirs, tu, exec); err != nil {
		return prepared{err: err}
	}
	owner := taskdir.Keep
	if tu.Set() {
		owner = taskdir.Owner{UID: tu.UID, GID: tu.GID}
	}
	layout := layoutOf(dirs, exec)
	f := &artifact.Fetcher{Layout: layout, AllowRead: ls.AllowRead, Owner: owner, TempDir: private}
	for _, a := range ls.Artifacts {
		log.Info("fetching an artifact", "source", a.Source, "destination", a.Destination)
		if err := f.Fetch(ctx, a); err != nil {
			return prepared{err: fmt.Errorf("%w: %w", wire.ErrArtifact, err)}
		}
	}
	r := &template.Renderer{Layout: layout, Env: spec.TaskEnv(ls.Spec, dirs, tu.Home), AllowRead: ls.AllowRead, Owner: owner}
	results, env, err := r.RenderAll(ctx, ls.Templates)
	if err != nil {
		return prepared{err: fmt.Errorf("%w: %w", wire.ErrTemplate, err)}
	}
	return prepared{env: env, renderer: r, results: results}
}

// startPreparing begins the preparation of a launch asked by (sc, id).
func (s *server) startPreparing(sc *sconn, id uint64, ls wire.Launch) {
	ctx, cancel := context.WithCancel(context.Background())
	s.preparing = &preparation{launch: ls, cancel: cancel, waiters: []waiter{{sc, id}}}
	log, private := s.log, s.taskDir
	go func() {
		p := prepare(ctx, log, ls, private)
		if err := ctx.Err(); err != nil && p.err == nil {
			p.err = fmt.Errorf("%w: preparation cancelled: %w", wire.ErrLaunch, err)
		}
		select {
		case s.preparedC <- p:
		case <-s.quit:
		}
	}()
}

// cancelPreparing cancels a preparation in flight (a stop or shutdown
// before the launch, the lease lost); its waiters are answered when it
// comes back.
func (s *server) cancelPreparing() {
	if s.preparing != nil {
		s.preparing.cancel()
	}
}

// prepared takes a preparation's outcome: the launch it was for goes on,
// or fails naming what could not be prepared.
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
	s.tmplEnv = p.env
	s.prep = &p
	first := pr.waiters[0]
	s.launch(first.c, first.id, pr.launch)
	for _, w := range pr.waiters[1:] {
		st := s.status()
		s.send(w.c, wire.Response{ID: w.id, Status: &st})
	}
}

// watchTemplates starts re-rendering the task's templates when the files
// they read change (see template.Watcher), once the task has launched.
func (s *server) watchTemplates() {
	p := s.prep
	if p == nil || p.renderer == nil {
		return
	}
	watched := false
	for _, r := range p.results {
		if len(r.Deps) > 0 {
			watched = true
		}
	}
	if !watched {
		return
	}
	w, err := template.NewWatcher(p.renderer, s.spec.Templates, p.results)
	if err != nil {
		s.log.Warn("templates will not be re-rendered: cannot watch what they read", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.watchStop = cancel
	s.changes = w.Changes()
	go func() {
		if err := w.Run(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("template watch ended", "err", err)
		}
	}()
}

// templateChanged applies a re-rendered template's change_mode to the
// running task.
func (s *server) templateChanged(c template.Change) {
	name := c.Template.Name()
	switch {
	case c.Err != nil:
		s.log.Warn("a template could not be rendered again; the previous output stays", "template", name, "err", c.Err)
		return
	case c.Template.Env:
		env := maps.Clone(s.tmplEnv)
		if env == nil {
			env = map[string]string{}
		}
		maps.Copy(env, c.Result.Env)
		s.tmplEnv = env
	}
	switch c.Mode {
	case template.ChangeNoop, template.ChangeScript:
		s.log.Info("a template changed; its change_mode leaves the task alone", "template", name, "mode", c.Mode.String())
	case template.ChangeSignal:
		if s.checkRunning() != nil {
			s.log.Info("a template changed while the task is not running; no signal sent", "template", name)
			return
		}
		s.log.Info("a template changed: signalling the task", "template", name, "signal", c.Signal)
		s.signalGroup(syscall.Signal(c.Signal))
	case template.ChangeRestart:
		s.forceRestart(fmt.Sprintf("%s changed (change_mode restart)", name))
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
