package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/taskfile"
)

// Limits on the desired state: it is untrusted input (whoever can write
// to etcd writes it), so its size is bounded before anything parses it.
const (
	// MaxSpecBytes bounds one desired task file.
	MaxSpecBytes = 256 << 10
	// MaxDesired bounds the desired tasks of one node.
	MaxDesired = 1024
)

// Desired is one task a node is told to run: its name (the key's last
// part) and its task file's text, exactly as `tether cluster start`
// wrote it.
type Desired struct {
	Name string
	// Spec is the task file (HCL), which the agent parses and checks
	// against the node's allow lists as it does a file of --config-dir.
	Spec []byte
	// ModRevision is the etcd revision of the last change of the key: a
	// changed spec has a new one.
	ModRevision int64
}

// DesiredSet is the whole desired state of a node at one revision.
type DesiredSet struct {
	Node string
	// Revision is the etcd revision the set is as of.
	Revision int64
	// Tasks are the valid desired tasks, by name: each parsed and passed
	// the node's allow lists for a spec from etcd (ReadDesired), the only
	// ones the local copy keeps.
	Tasks map[string]Desired
	// Invalid are the keys refused, by name, with why: the agent reports
	// them and runs none of them, and the local copy keeps none of them.
	Invalid map[string]error
	// FromCopy is set for the set read from the local copy at start,
	// before etcd answered.
	FromCopy bool
}

func (s DesiredSet) clone() DesiredSet {
	s.Tasks = maps.Clone(s.Tasks)
	s.Invalid = maps.Clone(s.Invalid)
	return s
}

// ValidateSpec checks what can be checked of a desired task file without
// the node: its name (the task id rule), its size (at most MaxSpecBytes),
// that it is UTF-8 text without NUL bytes, and that it is HCL syntax. The
// agent parses it as a task file and applies its allow lists.
//
// The form is the task file's text, not a JSON encoding of fsm.Spec: the
// agent then converges etcd's desired state through the very parser,
// defaults, path rules and allow-list checks it uses for --config-dir,
// with no second schema of the spec to keep in step (fsm.Spec has no
// stable wire form: its Go field names and nanosecond durations are not
// an interface), and an operator writes the same file for one node and
// for the fleet.
func ValidateSpec(name string, spec []byte) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := checkText(spec); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidSpec, name, err)
	}
	return nil
}

// checkText checks a task file's text: its size, UTF-8 without NUL
// bytes, HCL syntax within the parser's bounds on size, tokens and
// nesting (taskfile.CheckSyntax: nothing is evaluated).
func checkText(spec []byte) error {
	switch {
	case len(spec) == 0:
		return errors.New("empty")
	case len(spec) > MaxSpecBytes:
		return fmt.Errorf("%d bytes (at most %d)", len(spec), MaxSpecBytes)
	case !utf8.Valid(spec):
		return errors.New("not UTF-8 text")
	case bytes.IndexByte(spec, 0) >= 0:
		return errors.New("contains a NUL byte")
	}
	if diags := taskfile.CheckSyntax("spec.hcl", spec); diags.HasErrors() {
		return fmt.Errorf("not an HCL task file: %s", diags.Error())
	}
	return nil
}

// watcher follows a node's desired prefix: a list, then a watch from the
// list's revision, listed again after any error (a compaction, a lost
// leader, a reconnection that cannot resume), each set kept in a local
// copy before it is delivered. Each spec is judged (ReadDesired, under
// policy: parsed within the parser's bounds, the node's drivers and host
// namespaces for a spec from etcd) before it is kept: the copy holds
// nothing that did not pass, so nothing in it can take a restarted agent
// down.
type watcher struct {
	cli    *clientv3.Client
	keys   Keys
	node   string
	dir    string
	policy job.Policy
	log    hclog.Logger
	hooks  Hooks
	out    chan DesiredSet
}

func newWatcher(cli *clientv3.Client, keys Keys, node, dir string, policy job.Policy, log hclog.Logger, hooks Hooks) *watcher {
	return &watcher{cli: cli, keys: keys, node: node, dir: dir, policy: policy, log: log.Named("desired"), hooks: hooks, out: make(chan DesiredSet, 1)}
}

// desiredCopy is the local copy's file name in the node's directory.
const desiredCopy = "desired.json"

func (w *watcher) run(ctx context.Context) {
	set, err := loadDesiredCopy(w.dir, w.node, w.policy)
	switch {
	case err == nil:
		w.log.Info("desired state from the local copy", "revision", set.Revision, "tasks", len(set.Tasks))
		if len(set.Invalid) > 0 {
			// Dropped from the copy at once: judged once, never again at
			// the next start (an agent's flags may have narrowed since).
			for _, name := range sortedKeys(set.Invalid) {
				w.log.Error("desired task dropped from the local copy", "name", fmt.Sprintf("%q", name), "err", set.Invalid[name])
			}
			if err := saveDesiredCopy(w.dir, set); err != nil {
				w.log.Error("could not rewrite the local copy of the desired state", "err", err)
			}
		}
		w.deliver(set)
	case !errors.Is(err, os.ErrNotExist):
		w.log.Error("local copy of the desired state not used", "err", err)
	}
	var b backoff
	for ctx.Err() == nil {
		err := w.session(ctx, &b)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("desired state watch interrupted; listing again", "err", err)
		b.wait(ctx, 5*time.Second)
	}
}

// session lists the prefix, delivers it, then applies the watch's events
// until the watch fails.
func (w *watcher) session(ctx context.Context, b *backoff) error {
	set, err := w.list(ctx)
	if err != nil {
		return err
	}
	if err := w.commit(set); err != nil {
		return err
	}
	b.reset()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := w.keys.desiredPrefix(w.node)
	for resp := range w.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(set.Revision+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", prefix, err) // compacted, no leader, ...: list again
		}
		if resp.IsProgressNotify() || len(resp.Events) == 0 {
			continue
		}
		for _, ev := range resp.Events {
			name := strings.TrimPrefix(string(ev.Kv.Key), prefix)
			delete(set.Tasks, name)
			delete(set.Invalid, name)
			if ev.Type == mvccpb.DELETE {
				continue
			}
			w.add(&set, name, ev.Kv)
		}
		set.Revision = resp.Header.Revision
		if err := w.commit(set); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch closed")
}

// list reads the node's desired prefix at one revision.
func (w *watcher) list(ctx context.Context) (DesiredSet, error) {
	prefix := w.keys.desiredPrefix(w.node)
	resp, err := w.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxDesired+1))
	if err != nil {
		return DesiredSet{}, unavailable("list the desired state", err)
	}
	set := DesiredSet{Node: w.node, Revision: resp.Header.Revision, Tasks: map[string]Desired{}, Invalid: map[string]error{}}
	for i, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), prefix)
		if i == MaxDesired {
			set.Invalid[name] = fmt.Errorf("%w: node %s has more than %d desired tasks; the ones past %d (in key order) are not run", ErrInvalidSpec, w.node, MaxDesired, MaxDesired)
			break
		}
		w.add(&set, name, kv)
	}
	return set, nil
}

func (w *watcher) add(set *DesiredSet, name string, kv *mvccpb.KeyValue) {
	if len(set.Tasks) >= MaxDesired {
		set.Invalid[name] = fmt.Errorf("%w %q: node %s has %d desired tasks already (at most %d)", ErrInvalidSpec, name, w.node, len(set.Tasks), MaxDesired)
		return
	}
	if err := judge(name, kv.Value, w.policy); err != nil {
		set.Invalid[name] = err
		w.log.Error("desired task refused: not kept, not run", "name", name, "err", err)
		return
	}
	set.Tasks[name] = Desired{Name: name, Spec: kv.Value, ModRevision: kv.ModRevision}
}

// judge is the node's verdict on the desired spec of key name before it
// keeps it: ValidateSpec (name, size, text, syntax), then ReadDesired under
// policy (parsed within the parser's limits; the drivers, host namespaces
// and count the node allows a spec from etcd; the key's name the entry's).
func judge(name string, spec []byte, policy job.Policy) error {
	if err := ValidateSpec(name, spec); err != nil {
		return err
	}
	_, err := ReadDesired(name+".hcl", name, spec, policy)
	return err
}

// commit keeps set in the local copy, durably, then delivers it.
func (w *watcher) commit(set DesiredSet) error {
	w.hooks.crash(CrashDesiredBeforeCopy)
	if err := saveDesiredCopy(w.dir, set); err != nil {
		// Deliver anyway: etcd has the truth, and the copy is only for a
		// boot without etcd.
		w.log.Error("could not keep the local copy of the desired state", "err", err)
	}
	w.hooks.crash(CrashDesiredAfterCopy)
	w.deliver(set)
	return nil
}

// deliver replaces any set not yet taken by the newest.
func (w *watcher) deliver(set DesiredSet) { deliverLatest(w.out, set.clone()) }

// deliverLatest puts v in out (a channel of one slot, with one sender),
// replacing a value not yet taken: the reader gets the newest only.
func deliverLatest[T any](out chan T, v T) {
	select {
	case <-out:
	default:
	}
	out <- v
}

type copyFile struct {
	Node     string     `json:"node"`
	Revision int64      `json:"revision"`
	Tasks    []copyTask `json:"tasks"`
}

type copyTask struct {
	Name        string `json:"name"`
	Spec        string `json:"spec"`
	ModRevision int64  `json:"mod_revision"`
}

func saveDesiredCopy(dir string, set DesiredSet) error {
	f := copyFile{Node: set.Node, Revision: set.Revision, Tasks: []copyTask{}}
	for _, name := range sortedKeys(set.Tasks) {
		d := set.Tasks[name]
		f.Tasks = append(f.Tasks, copyTask{Name: name, Spec: string(d.Spec), ModRevision: d.ModRevision})
	}
	b, err := json.MarshalIndent(&f, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, desiredCopy, b)
}

// LoadDesiredCopy reads the local copy of node's desired state that a
// Node keeps in dir (NodeConfig.Dir), judged as etcd's sets are under
// policy (FromCopy set; a spec that fails is in Invalid, with why):
// what `tether agent --node … --once` converges, without etcd. A missing
// copy is os.ErrNotExist.
func LoadDesiredCopy(dir, node string, policy job.Policy) (DesiredSet, error) {
	return loadDesiredCopy(dir, node, policy)
}

// readCopy reads the local copy name of dir into f, whose node (the field
// at nodeOf) must be node.
func readCopy(dir, name, node string, f any, nodeOf *string) error {
	b, err := readPrivateFile(dir, name)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrLocalCopy, name, err)
	}
	if *nodeOf != node {
		return fmt.Errorf("%w: %s is node %q's, not %q's", ErrLocalCopy, name, *nodeOf, node)
	}
	return nil
}

// loadDesiredCopy reads the local copy, judging it as etcd's sets are
// judged: a copy someone edited, or one kept under wider flags than the
// agent's now, gets no more trust than etcd.
func loadDesiredCopy(dir, node string, policy job.Policy) (DesiredSet, error) {
	var f copyFile
	if err := readCopy(dir, desiredCopy, node, &f, &f.Node); err != nil {
		return DesiredSet{}, err
	}
	set := DesiredSet{Node: node, Revision: f.Revision, Tasks: map[string]Desired{}, Invalid: map[string]error{}, FromCopy: true}
	for _, t := range f.Tasks {
		if len(set.Tasks) >= MaxDesired {
			break
		}
		if err := judge(t.Name, []byte(t.Spec), policy); err != nil {
			set.Invalid[t.Name] = err
			continue
		}
		set.Tasks[t.Name] = Desired{Name: t.Name, Spec: []byte(t.Spec), ModRevision: t.ModRevision}
	}
	return set, nil
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
