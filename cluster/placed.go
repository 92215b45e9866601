package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The node's side of placed jobs: the copies the scheduler placed on the
// node (place/NODE/), each with the job's file and inputs at the version
// it names (jobspec/JOB/VERSION), followed as the desired state is (a
// list, then a watch from its revision, listed again after any error),
// bounded, and kept in a local copy before it is delivered.

// Bounds on what a node takes of its placements: they are written by
// whoever can write to etcd, and the node holds them in memory and in its
// local copy.
const (
	// MaxPlaced bounds the copies a node runs; a placement past it is
	// refused (its verdict says so, and the scheduler places it again
	// elsewhere).
	MaxPlaced = 1024
	// MaxPlacedSpecBytes bounds the job files and inputs a node holds for
	// its placements, summed over the job versions they name.
	MaxPlacedSpecBytes = 16 << 20
)

// PlacedCopy is a copy placed on the node: its placement (Revision is the
// placement revision, its identity on the node) and the job's file and
// inputs at the version it names.
type PlacedCopy struct {
	Placed Placed
	Spec   JobSpec
}

// PlacedSet is what is placed on a node at one revision.
type PlacedSet struct {
	Node string
	// Revision is the etcd revision the set is as of.
	Revision int64
	// Copies are the placements the node reads, by copy.
	Copies map[CopyID]PlacedCopy
	// Refused are the placements the node refuses before reading them (a
	// value that does not decode or names another node, a job version with
	// no spec, past MaxPlaced or MaxPlacedSpecBytes), by copy, with the
	// placement revision and why: the node's verdict on each is refused.
	Refused map[CopyID]Refusal
	// FromCopy is set for the set read from the local copy, before etcd
	// answered.
	FromCopy bool
}

// Refusal is a placement the node refuses, at its revision.
type Refusal struct {
	Revision int64
	Err      error
}

func (s PlacedSet) clone() PlacedSet {
	s.Copies = maps.Clone(s.Copies)
	s.Refused = maps.Clone(s.Refused)
	return s
}

// specBytes sums the sizes of the distinct job versions the set names.
func (s PlacedSet) specBytes() int {
	seen := map[string]bool{}
	n := 0
	for _, c := range s.Copies {
		k := c.Spec.Job + "/" + strconv.FormatUint(c.Spec.Version, 10)
		if !seen[k] {
			seen[k] = true
			n += c.Spec.size()
		}
	}
	return n
}

// size is what a spec weighs against MaxPlacedSpecBytes.
func (s JobSpec) size() int {
	n := len(s.Text) + len(s.File)
	for _, f := range s.Inputs.VarFiles {
		n += len(f.Name) + len(f.Text)
	}
	for _, m := range []map[string]string{s.Inputs.Vars, s.Inputs.Env, s.Inputs.Meta} {
		for k, v := range m {
			n += len(k) + len(v)
		}
	}
	return n
}

// placeWatcher follows the node's placements (place/NODE/).
type placeWatcher struct {
	cli   *clientv3.Client
	keys  Keys
	node  string
	dir   string
	log   hclog.Logger
	hooks Hooks
	out   chan PlacedSet
	again chan struct{} // relist: list again now
	// specs caches the job versions read (they never change), by
	// "JOB/VERSION"; only the ones a set names are kept.
	specs map[string]JobSpec
}

func newPlaceWatcher(cli *clientv3.Client, keys Keys, node, dir string, log hclog.Logger, hooks Hooks) *placeWatcher {
	return &placeWatcher{cli: cli, keys: keys, node: node, dir: dir, log: log.Named("placed"), hooks: hooks,
		out: make(chan PlacedSet, 1), again: make(chan struct{}, 1), specs: map[string]JobSpec{}}
}

// relist makes the watcher list the placements again (and deliver them)
// at once, whether or not its watch still runs.
func (w *placeWatcher) relist() {
	select {
	case w.again <- struct{}{}:
	default:
	}
}

// errRelist ends a session that was asked to list again.
var errRelist = errors.New("asked to list again")

// placedCopy is the local copy's file name in the node's directory.
const placedCopy = "placed.json"

func (w *placeWatcher) run(ctx context.Context) {
	set, err := loadPlacedCopy(w.dir, w.node)
	switch {
	case err == nil:
		w.log.Info("placements from the local copy", "revision", set.Revision, "copies", len(set.Copies))
		for _, c := range set.Copies {
			w.specs[specKey(c.Spec.Job, c.Spec.Version)] = c.Spec
		}
		w.deliver(set)
	case !errors.Is(err, os.ErrNotExist):
		w.log.Error("local copy of the placements not used", "err", err)
	}
	var b backoff
	for ctx.Err() == nil {
		err := w.session(ctx, &b)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errRelist) {
			continue
		}
		w.log.Warn("placements watch interrupted; listing again", "err", err)
		b.wait(ctx, 5*time.Second)
	}
}

func specKey(job string, version uint64) string { return job + "/" + strconv.FormatUint(version, 10) }

// session lists the prefix, delivers it, then applies the watch's events
// until the watch fails.
func (w *placeWatcher) session(ctx context.Context, b *backoff) error {
	prefix := w.keys.placePrefix(w.node)
	select {
	case <-w.again: // this list is the one asked for
	default:
	}
	resp, err := w.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxPlaced+1))
	if err != nil {
		return unavailable("list the node's placements", err)
	}
	set := PlacedSet{Node: w.node, Revision: resp.Header.Revision, Copies: map[CopyID]PlacedCopy{}, Refused: map[CopyID]Refusal{}}
	for i, kv := range resp.Kvs {
		if i == MaxPlaced {
			if id, ok := copyID(w.keys.split(string(kv.Key), "place/"+w.node+"/", 3)); ok {
				set.Refused[id] = Refusal{Revision: kv.ModRevision, Err: fmt.Errorf("node %s holds %d placed copies already (at most %d)", w.node, MaxPlaced, MaxPlaced)}
			}
			break
		}
		if err := w.add(ctx, &set, kv, resp.Header.Revision); err != nil {
			return err
		}
	}
	if more := resp.More; more {
		w.log.Error("more placements than a node takes; the ones past the bound are refused", "max", MaxPlaced)
	}
	w.commit(set)
	b.reset()
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := w.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(set.Revision+1))
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case <-w.again:
			return errRelist
		case resp, ok = <-wch:
		}
		if !ok {
			break
		}
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", prefix, err) // compacted, no leader, ...: list again
		}
		if resp.IsProgressNotify() || len(resp.Events) == 0 {
			continue
		}
		for _, ev := range resp.Events {
			id, ok := copyID(w.keys.split(string(ev.Kv.Key), "place/"+w.node+"/", 3))
			if !ok {
				continue
			}
			delete(set.Copies, id)
			delete(set.Refused, id)
			if ev.Type == mvccpb.DELETE {
				continue
			}
			if len(set.Copies)+len(set.Refused) >= MaxPlaced {
				set.Refused[id] = Refusal{Revision: ev.Kv.ModRevision, Err: fmt.Errorf("node %s holds %d placed copies already (at most %d)", w.node, MaxPlaced, MaxPlaced)}
				continue
			}
			if err := w.add(ctx, &set, ev.Kv, 0); err != nil {
				return err
			}
		}
		set.Revision = resp.Header.Revision
		w.commit(set)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch closed")
}

// add reads one placement key into set: its value, and the job version it
// names (read at rev when rev is not 0, the list's; specs are cached).
// Only an error of etcd is returned: a placement the node cannot read is
// refused in the set.
func (w *placeWatcher) add(ctx context.Context, set *PlacedSet, kv *mvccpb.KeyValue, rev int64) error {
	key := string(kv.Key)
	id, ok := copyID(w.keys.split(key, "place/"+w.node+"/", 3))
	if !ok {
		w.log.Error("a key under the node's placements that names no copy; ignored", "key", key)
		return nil
	}
	refuse := func(format string, args ...any) {
		err := fmt.Errorf(format, args...)
		set.Refused[id] = Refusal{Revision: kv.ModRevision, Err: err}
		w.log.Error("placement refused", "copy", id.String(), "err", err)
	}
	var pl Placed
	if err := decodeJSON(key, kv.Value, &pl); err != nil {
		refuse("%v", err)
		return nil
	}
	if pl.ID() != id || pl.Node != w.node {
		refuse("the placement at %s names copy %s on node %q", key, pl.ID(), pl.Node)
		return nil
	}
	if ValidateJobName("job", id.Job) != nil || ValidateJobName("group", id.Group) != nil {
		refuse("copy %s: a job or group name that breaks the task id rule", id)
		return nil
	}
	pl.Revision = kv.ModRevision
	sk := specKey(id.Job, pl.Version)
	spec, ok := w.specs[sk]
	if !ok {
		opts := []clientv3.OpOption{}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := w.cli.Get(ctx, w.keys.jobSpec(id.Job, pl.Version), opts...)
		if err != nil {
			return unavailable("read a placed job's spec", err)
		}
		if len(resp.Kvs) == 0 {
			refuse("job %s has no version %d in etcd", id.Job, pl.Version)
			return nil
		}
		if err := decodeJSON(string(resp.Kvs[0].Key), resp.Kvs[0].Value, &spec); err != nil {
			refuse("%v", err)
			return nil
		}
		if spec.Job != id.Job || spec.Version != pl.Version {
			refuse("the spec at %s is job %s version %d", string(resp.Kvs[0].Key), spec.Job, spec.Version)
			return nil
		}
		if n := spec.size(); n > 2*MaxSpecBytes {
			refuse("job %s version %d: its file and inputs are %d bytes (at most %d)", id.Job, pl.Version, n, 2*MaxSpecBytes)
			return nil
		}
	}
	set.Copies[id] = PlacedCopy{Placed: pl, Spec: spec}
	if set.specBytes() > MaxPlacedSpecBytes {
		delete(set.Copies, id)
		refuse("the job files placed on node %s would pass %d bytes", w.node, MaxPlacedSpecBytes)
		return nil
	}
	w.specs[sk] = spec
	return nil
}

// commit keeps set in the local copy, durably, then delivers it; the spec
// cache keeps the versions the set names.
func (w *placeWatcher) commit(set PlacedSet) {
	w.hooks.crash(CrashPlacedBeforeCopy)
	if err := savePlacedCopy(w.dir, set); err != nil {
		// Deliver anyway: etcd has the truth, and the copy is only for a
		// start without etcd.
		w.log.Error("could not keep the local copy of the placements", "err", err)
	}
	w.hooks.crash(CrashPlacedAfterCopy)
	used := map[string]bool{}
	for _, c := range set.Copies {
		used[specKey(c.Spec.Job, c.Spec.Version)] = true
	}
	for k := range w.specs {
		if !used[k] {
			delete(w.specs, k)
		}
	}
	w.deliver(set)
}

// deliver replaces any set not yet taken by the newest.
func (w *placeWatcher) deliver(set PlacedSet) { deliverLatest(w.out, set.clone()) }

type placedFile struct {
	Node     string            `json:"node"`
	Revision int64             `json:"revision"`
	Copies   []placedFileEntry `json:"copies"`
	Specs    []JobSpec         `json:"specs"`
}

type placedFileEntry struct {
	Placed   Placed `json:"placed"`
	Revision int64  `json:"revision"`
}

func savePlacedCopy(dir string, set PlacedSet) error {
	f := placedFile{Node: set.Node, Revision: set.Revision, Copies: []placedFileEntry{}, Specs: []JobSpec{}}
	seen := map[string]bool{}
	for _, id := range sortedIDs(set.Copies) {
		c := set.Copies[id]
		f.Copies = append(f.Copies, placedFileEntry{Placed: c.Placed, Revision: c.Placed.Revision})
		if k := specKey(c.Spec.Job, c.Spec.Version); !seen[k] {
			seen[k] = true
			f.Specs = append(f.Specs, c.Spec)
		}
	}
	b, err := json.Marshal(&f)
	if err != nil {
		return err
	}
	return writeFileAtomic(dir, placedCopy, b)
}

// LoadPlacedCopy reads the local copy of node's placements that a Node
// keeps in dir (NodeConfig.Dir), checked as etcd's are (FromCopy set). A
// missing copy is os.ErrNotExist.
func LoadPlacedCopy(dir, node string) (PlacedSet, error) { return loadPlacedCopy(dir, node) }

// loadPlacedCopy reads the local copy, checking it as etcd's placements
// are checked: a copy someone edited gets no more trust than etcd.
func loadPlacedCopy(dir, node string) (PlacedSet, error) {
	var f placedFile
	if err := readCopy(dir, placedCopy, node, &f, &f.Node); err != nil {
		return PlacedSet{}, err
	}
	specs := map[string]JobSpec{}
	for _, s := range f.Specs {
		specs[specKey(s.Job, s.Version)] = s
	}
	set := PlacedSet{Node: node, Revision: f.Revision, Copies: map[CopyID]PlacedCopy{}, Refused: map[CopyID]Refusal{}, FromCopy: true}
	for _, e := range f.Copies {
		pl := e.Placed
		pl.Revision = e.Revision
		id := pl.ID()
		spec, ok := specs[specKey(pl.Job, pl.Version)]
		switch {
		case pl.Node != node || ValidateJobName("job", id.Job) != nil || ValidateJobName("group", id.Group) != nil || id.Index < 0 || pl.Revision <= 0:
			continue // nothing to say a verdict on
		case !ok:
			set.Refused[id] = Refusal{Revision: pl.Revision, Err: fmt.Errorf("the local copy holds no spec of job %s version %d", pl.Job, pl.Version)}
		case len(set.Copies) >= MaxPlaced:
			set.Refused[id] = Refusal{Revision: pl.Revision, Err: fmt.Errorf("more than %d placed copies", MaxPlaced)}
		default:
			set.Copies[id] = PlacedCopy{Placed: pl, Spec: spec}
		}
	}
	if set.specBytes() > MaxPlacedSpecBytes {
		return PlacedSet{}, fmt.Errorf("%w: %s holds more than %d bytes of job files", ErrLocalCopy, placedCopy, MaxPlacedSpecBytes)
	}
	return set, nil
}

// sortedCopyIDs lists a set's copies and refusals in copy order.
func (s PlacedSet) sortedCopyIDs() []CopyID {
	ids := sortedIDs(s.Copies)
	for id := range s.Refused {
		ids = append(ids, id)
	}
	sortCopies(ids)
	return slices.Compact(ids)
}
