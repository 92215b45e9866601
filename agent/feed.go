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
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

// A Feed declares desired entries from outside the config dir: the
// fleet's desired state, which tether-fleet's agent (tether agent --node …
// --cluster …) receives from etcd and sets here. Its entries are read
// through the same path as the config dir's files (package job, with the
// agent's own node: its allow lists, which nothing set here can widen) and
// converged by the same loop and the same Decide: an entry set here
// starts, one no longer set stops, a changed one replaces its tasks.
//
// A feed's entries are recorded as config dir entries (store.SourceDir)
// whose file is a name under the feed's Dir, a name that is no directory
// of the host (such as "etcd:/tether/desired/n1"): so a record tells which
// feed declared it, and a record of the config dir is never taken for the
// feed's, nor the other way round. Their text is kept in the record.
//
// Until the first Set the feed's state is unknown (etcd has not answered
// and there is no local copy): its records are then left as they are,
// never stopped for want of a declaration.
type Feed struct {
	dir string

	mu    sync.Mutex
	set   bool
	decl  []FeedEntry
	probs []FileProblem
	wake  func()
}

// FeedEntry is a feed's declaration: the entry's name (its key), the file
// (Feed.File of the key), the file's text and the inputs it is read with
// (the selection of a task or group of it).
type FeedEntry struct {
	Name   string
	File   string
	Text   []byte
	Inputs job.Inputs
}

// NewFeed returns a feed whose entries are declared under dir, an absolute
// name that is not a directory of the host's (see Feed).
func NewFeed(dir string) (*Feed, error) {
	if !strings.Contains(dir, ":") || filepath.Clean(dir) != dir || strings.HasSuffix(dir, "/") {
		return nil, fmt.Errorf("agent: feed dir %q: give a clean name with a scheme, such as \"etcd:/tether/desired/n1\"", dir)
	}
	return &Feed{dir: dir}, nil
}

// Dir is the name the feed's entries are declared under.
func (f *Feed) Dir() string { return f.dir }

// File is the name an entry of the feed is declared by (and recorded with).
func (f *Feed) File(name string) string { return f.dir + "/" + name }

// Set replaces the feed's declarations: entries by their name (each read
// from its text with its inputs), and problems the declarations refused
// by name with why (their tasks are left as they are, as a config dir
// file that does not parse). The agent converges to it at once.
func (f *Feed) Set(entries map[string]FeedEntry, problems map[string]error) {
	var decl []FeedEntry
	for _, n := range slices.Sorted(maps.Keys(entries)) {
		e := entries[n]
		e.Name, e.File = n, f.File(n)
		decl = append(decl, e)
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
func (f *Feed) get() ([]FeedEntry, []FileProblem, string) {
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
// or the metrics are set: every append is told to Appended, whatever its
// outcome (an append whose answer was lost may have committed; the reader
// reads the truth), and the events of each one that committed to the
// metrics.
type notingLog struct {
	store.Log
	note func(task string)
	met  *agentMetrics
}

var _ store.Log = notingLog{}

func (l notingLog) Append(ctx context.Context, task string, expected uint64, events ...fsm.Event) (uint64, error) {
	v, err := l.Log.Append(ctx, task, expected, events...)
	if err == nil {
		l.met.committed(task, events)
	}
	if l.note != nil {
		l.note(task)
	}
	return v, err
}

// driverLog is the log the agent's driver appends to: st, or st noting
// every append to Config.Appended and the metrics.
func driverLog(st store.Log, cfg Config, met *agentMetrics) store.Log {
	if cfg.Appended == nil && met == nil {
		return st
	}
	return notingLog{Log: st, note: cfg.Appended, met: met}
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
