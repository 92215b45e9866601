package template

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/fsnotify/fsnotify"
)

// Change is a template whose output changed after one of the files it
// reads changed: the executor applies Mode (restart the task, send it
// Signal, or nothing).
type Change struct {
	Index    int // in the templates given to NewWatcher
	Template Template
	Result   Result
	Mode     ChangeMode
	Signal   syscall.Signal
	// Err is a re-render that failed: the previous output stays in place
	// and Mode does not apply.
	Err error
}

// Watcher re-renders templates when the files they read change.
type Watcher struct {
	r    *Renderer
	ts   []Template
	deps [][]string
	fw   *fsnotify.Watcher
	dirs map[string]bool
	out  chan Change
}

// NewWatcher watches the files each template read (results are what
// RenderAll returned for ts, in the same order). Templates that read no
// file (data only, no file function) never change and are not watched.
func NewWatcher(r *Renderer, ts []Template, results []Result) (*Watcher, error) {
	if len(ts) != len(results) {
		return nil, fmt.Errorf("%w: %d templates but %d results", ErrBadTemplate, len(ts), len(results))
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("template: watch: %w", err)
	}
	w := &Watcher{r: r, ts: ts, fw: fw, dirs: map[string]bool{}, out: make(chan Change)}
	for _, res := range results {
		w.deps = append(w.deps, res.Deps)
		if err := w.watch(res.Deps); err != nil {
			fw.Close()
			return nil, err
		}
	}
	return w, nil
}

// watch adds the directories of paths (a file replaced by a rename is seen
// only through its directory).
func (w *Watcher) watch(paths []string) error {
	for _, p := range paths {
		d := filepath.Dir(p)
		if w.dirs[d] {
			continue
		}
		if err := w.fw.Add(d); err != nil {
			return fmt.Errorf("template: watch %s: %w", d, err)
		}
		w.dirs[d] = true
	}
	return nil
}

// Changes delivers each change; it is closed when Run returns.
func (w *Watcher) Changes() <-chan Change { return w.out }

// Run watches until ctx ends, then releases the watches and closes
// Changes. It returns ctx's error, or the watch's own failure.
func (w *Watcher) Run(ctx context.Context) error {
	defer close(w.out)
	defer w.fw.Close()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err, ok := <-w.fw.Errors:
			if !ok {
				return fmt.Errorf("template: watch closed")
			}
			return fmt.Errorf("template: watch: %w", err)
		case ev, ok := <-w.fw.Events:
			if !ok {
				return fmt.Errorf("template: watch closed")
			}
			if !ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Create) && !ev.Has(fsnotify.Rename) && !ev.Has(fsnotify.Chmod) {
				continue
			}
			for i, deps := range w.deps {
				if !slices.Contains(deps, filepath.Clean(ev.Name)) {
					continue
				}
				c := w.rerender(ctx, i)
				if c == nil {
					continue
				}
				select {
				case w.out <- *c:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
}

// rerender renders template i again; it reports a change only when the
// output changed (or the render failed).
func (w *Watcher) rerender(ctx context.Context, i int) *Change {
	t := w.ts[i]
	res, err := w.r.Render(ctx, t)
	if err != nil {
		return &Change{Index: i, Template: t, Err: err}
	}
	if len(res.Deps) > 0 {
		w.deps[i] = res.Deps
		if err := w.watch(res.Deps); err != nil {
			return &Change{Index: i, Template: t, Result: res, Err: err}
		}
	}
	if !res.Changed {
		return nil
	}
	return &Change{Index: i, Template: t, Result: res, Mode: t.ChangeMode, Signal: syscall.Signal(t.ChangeSignal)}
}
