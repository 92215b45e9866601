package agent

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/store"
)

// A Feed declares desired tasks from outside the config dir: the fleet's
// desired state, which tether-fleet's agent (tether agent --node …
// --cluster …) receives from etcd and sets here. Its tasks are converged
// exactly as the config dir's are, by the same loop and the same Decide: a
// task set here starts, a task no longer set stops, a changed spec
// replaces its task. They run under the agent's allow lists (its driver's),
// which nothing set here can widen.
//
// A feed's tasks are recorded as config dir tasks (store.SourceDir) whose
// file is a path under the feed's Dir, a name that is no directory of the
// host (such as "etcd:/tether/desired/n1"): so a record tells which feed
// declared it, and a record of the config dir is never taken for the
// feed's, nor the other way round.
//
// Until the first Set the feed's state is unknown (etcd has not answered
// and there is no local copy): its records are then left as they are,
// never stopped for want of a declaration.
type Feed struct {
	dir string

	mu    sync.Mutex
	set   bool
	decl  []Declared
	probs []FileProblem
	wake  func()
}

// NewFeed returns a feed whose tasks are declared under dir, an absolute
// name that is not a directory of the host's (see Feed).
func NewFeed(dir string) (*Feed, error) {
	if !strings.Contains(dir, ":") || filepath.Clean(dir) != dir || strings.HasSuffix(dir, "/") {
		return nil, fmt.Errorf("agent: feed dir %q: give a clean name with a scheme, such as \"etcd:/tether/desired/n1\"", dir)
	}
	return &Feed{dir: dir}, nil
}

// Dir is the name the feed's tasks are declared under.
func (f *Feed) Dir() string { return f.dir }

// File is the name a task of the feed is declared by (and recorded with).
func (f *Feed) File(name string) string { return f.dir + "/" + name }

// Set replaces the feed's declarations: specs are the feed's tasks by
// their declaring name (the file name, Feed.File(name): each spec keeps its
// own Spec.Name, which is the desired task's name), and problems the
// declarations refused by name with why (their tasks are left as they are,
// as a config dir file that does not parse). The agent converges to it at
// once.
func (f *Feed) Set(specs map[string]fsm.Spec, problems map[string]error) {
	var decl []Declared
	for _, n := range slices.Sorted(maps.Keys(specs)) {
		s := specs[n]
		decl = append(decl, Declared{Name: s.Name, Source: store.SourceDir, File: f.File(n), Spec: s})
	}
	var probs []FileProblem
	for _, n := range slices.Sorted(maps.Keys(problems)) {
		probs = append(probs, FileProblem{File: f.File(n), Name: n, Err: problems[n]})
	}
	f.mu.Lock()
	f.set, f.decl, f.probs = true, decl, probs
	wake := f.wake
	f.mu.Unlock()
	if wake != nil {
		wake()
	}
}

// get returns the feed's declarations, or why they are not known.
func (f *Feed) get() ([]Declared, []FileProblem, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.set {
		return nil, nil, fmt.Sprintf("the desired state of %s is not known yet (no answer, and no local copy)", f.dir)
	}
	return slices.Clone(f.decl), slices.Clone(f.probs), ""
}

func (f *Feed) onSet(wake func()) {
	f.mu.Lock()
	f.wake = wake
	f.mu.Unlock()
}

// notingLog is the agent's store as its driver's log when Config.Appended
// is set: every append is told, whatever its outcome (an append whose
// answer was lost may have committed; the reader reads the truth).
type notingLog struct {
	store.Log
	note func(task string)
}

var _ store.Log = notingLog{}

func (l notingLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	v, err := l.Log.Append(ctx, task, expected, events...)
	l.note(task)
	return v, err
}

// driverLog is the log the agent's driver appends to: st, or st noting
// every append to Config.Appended.
func driverLog(st store.Log, cfg Config) store.Log {
	if cfg.Appended == nil {
		return st
	}
	return notingLog{Log: st, note: cfg.Appended}
}

// Versions lists every task of the agent's store with its version (the
// sequence of its last committed event), in id order: the reads of a
// mirror of the local log (tether-fleet's), through the store the agent
// holds open.
func (a *Agent) Versions(ctx context.Context) ([]store.TaskVersion, error) {
	return a.st.Versions(ctx)
}

// LoadFrom returns up to limit of task's committed events from sequence
// from on (store.Store.LoadFrom), through the store the agent holds open.
func (a *Agent) LoadFrom(ctx context.Context, task string, from uint64, limit int) ([]fsm.Event, error) {
	return a.st.LoadFrom(ctx, task, from, limit)
}
