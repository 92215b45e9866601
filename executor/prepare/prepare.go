//go:build linux

// Package prepare fetches a job file task's artifacts and renders its
// templates in the executor before the task's first launch, and
// re-renders the templates while it runs (package artifact, template and
// taskdir do the work). The executor process (package executor/server)
// takes it as a server.Preparer: tether's own binary serves executor mode
// with it (server.ServeWith); the standalone cmd/tether-executor does not
// link it, so that an executor that runs no job file's template pays
// neither for net/http nor text/template (measured: 3.7 MB of RSS an idle
// executor, 4.7 MB without), and refuses a launch that needs preparing.
//
// Everything runs as the executor's user (root for exec), writing only
// through taskdir.Root (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS) below
// the task and alloc directories, owned by the task's user; a read of the
// task's own files is refused for a file with several links the task's
// user does not own (taskdir.Root.ReadFileAs).
package prepare

import (
	"context"
	"fmt"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/artifact"
	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/executor/server"
	"github.com/tether-fsm/tether/taskdir"
	"github.com/tether-fsm/tether/template"
)

// Preparer is the server.Preparer of artifacts and templates.
type Preparer struct{}

var _ server.Preparer = Preparer{}

// Prepare fetches ls's artifacts, then renders its templates (Nomad's
// order: a template may read what an artifact placed), in dirs, which
// exist. A failure is wire.ErrArtifact or wire.ErrTemplate naming the
// source or the template.
func (Preparer) Prepare(ctx context.Context, log hclog.Logger, ls wire.Launch, dirs spec.Dirs) (server.Prepared, error) {
	exec := ls.Driver == wire.ModeExec
	tu, err := spec.UserOf(ls.Spec)
	if err != nil {
		return nil, err
	}
	owner := taskdir.Keep
	if tu.Set() {
		owner = taskdir.Owner{UID: tu.UID, GID: tu.GID}
	}
	layout := taskdir.Layout{TaskDir: dirs.Task, AllocDir: dirs.Alloc, Chroot: exec}
	f := &artifact.Fetcher{Layout: layout, AllowRead: ls.AllowRead, Owner: owner, TempDir: dirs.Private}
	for _, a := range ls.Artifacts {
		log.Info("fetching an artifact", "source", a.Source, "destination", a.Destination)
		if err := f.Fetch(ctx, a); err != nil {
			err = fmt.Errorf("%w: %w", wire.ErrArtifact, err)
			if !artifact.Retryable(err) {
				err = wire.Definite(err)
			}
			return nil, err
		}
	}
	r := &template.Renderer{Layout: layout, Env: spec.TaskEnv(ls.Spec, dirs, tu.Home), AllowRead: ls.AllowRead, Owner: owner}
	results, env, err := r.RenderAll(ctx, ls.Templates)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", wire.ErrTemplate, err)
	}
	return &prepared{env: env, renderer: r, templates: ls.Templates, results: results}, nil
}

// prepared is what a preparation left: the env = true templates'
// variables, and what a watch needs.
type prepared struct {
	env       map[string]string
	renderer  *template.Renderer
	templates []template.Template
	results   []template.Result
}

func (p *prepared) Env() map[string]string { return p.env }

// Watch re-renders a template when a file it read changes (its source, a
// file its file function read), until ctx ends; nil when no template
// reads any file (it can never change).
func (p *prepared) Watch(ctx context.Context) (<-chan server.Change, error) {
	watched := false
	for _, r := range p.results {
		watched = watched || len(r.Deps) > 0
	}
	if !watched {
		return nil, nil
	}
	w, err := template.NewWatcher(p.renderer, p.templates, p.results)
	if err != nil {
		return nil, err
	}
	out := make(chan server.Change)
	go func() {
		defer close(out)
		errc := make(chan error, 1)
		go func() { errc <- w.Run(ctx) }()
		for c := range w.Changes() {
			sc := server.Change{Template: c.Template.Name(), Mode: c.Mode, Signal: syscall.Signal(c.Signal), Err: c.Err}
			if c.Template.Env && c.Err == nil {
				sc.Env = c.Result.Env
			}
			select {
			case out <- sc:
			case <-ctx.Done():
				return
			}
		}
		if err := <-errc; err != nil && ctx.Err() == nil {
			select { // the watch itself failed: no change is seen from now on
			case out <- server.Change{Err: fmt.Errorf("the watch of the templates' files ended: %w", err)}:
			case <-ctx.Done():
			}
		}
	}()
	return out, nil
}
