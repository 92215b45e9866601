package crashfs

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// StateOptions choose the crash states CrashStates returns.
type StateOptions struct {
	// Subsets is the number of seeded random subsets of the pending
	// operations tried in each interval between persistence points; 0
	// means 3, a negative number none.
	Subsets int
	// Seed seeds the random subsets, so a run can be replayed.
	Seed uint64
	// Since skips the crash states of intervals that end before this mark
	// (the zero Mark skips none): a test's setup need not be explored.
	Since Mark
}

// CrashState is one state the disk may hold after a power loss: the
// durable image after boundary After, plus the pending operations Kept
// (none: "at boundary After", every unsynced write dropped). It stands for
// a crash at the last moment of the interval between boundary After and the
// next one, so every operation and mark of that interval happened before
// it: Before reports which marks did.
type CrashState struct {
	// Name says which state this is: "b7" is boundary 7 with everything
	// unsynced dropped; "b7+op41" keeps the single pending operation #41;
	// "b7+first3" the first three operations since boundary 7; "b7+all"
	// every pending operation (what a SIGKILL leaves); "b7+rand2" the
	// third random subset.
	Name string
	// After is the index of the last persistence point before the crash (0:
	// none since the mount).
	After int
	// Kept lists the pending operations the state keeps, in order.
	Kept []Op

	moment uint64 // every op and mark with a smaller Seq happened before the crash
	img    *image
}

// AtBoundary reports whether the state keeps nothing unsynced.
func (s *CrashState) AtBoundary() bool { return len(s.Kept) == 0 }

// Before reports whether m was marked before this crash: whatever was
// acknowledged at m must survive in this state.
func (s *CrashState) Before(m Mark) bool { return m.Seq > 0 && m.Seq < s.moment }

func (s *CrashState) String() string {
	if len(s.Kept) == 0 {
		return s.Name + " (every unsynced operation dropped)"
	}
	var sb strings.Builder
	sb.WriteString(s.Name + " (keeping")
	for i, op := range s.Kept {
		if i == 8 {
			fmt.Fprintf(&sb, " ... %d more", len(s.Kept)-i)
			break
		}
		sb.WriteString(" " + op.String() + ";")
	}
	sb.WriteString(")")
	return sb.String()
}

// CrashStates returns the crash states of the operations logged so far, at
// every persistence point and between each one and the next: for each
// interval, the durable image alone, with each single operation issued
// since the last boundary, with each prefix of those, with every pending
// operation, and with opts.Subsets random subsets of the pending ones.
// States with the same content are returned once, as the one of the latest
// interval (whose Before holds for the most marks), the first made there.
func (f *FS) CrashStates(opts StateOptions) []*CrashState {
	return crashStates(f.initial, f.Ops(), opts)
}

func crashStates(initial *image, ops []Op, opts StateOptions) []*CrashState {
	if opts.Subsets == 0 {
		opts.Subsets = 3
	}
	var states []*CrashState
	seen := map[key]int{}
	durable := initial.clone()
	var pending []int // indices into ops
	boundary, last := 0, -1

	emit := func(base *image, name string, kept []int, moment uint64) {
		img := base
		if len(kept) > 0 {
			img = base.clone()
			for _, i := range kept {
				img.apply(&ops[i])
			}
		}
		st := &CrashState{Name: fmt.Sprintf("b%d%s", boundary, name), After: boundary, moment: moment, img: img}
		for _, i := range kept {
			st.Kept = append(st.Kept, ops[i])
		}
		k := img.key()
		if at, ok := seen[k]; ok {
			if moment > states[at].moment {
				states[at] = st // the later crash: Before holds for more marks
			}
			return
		}
		seen[k] = len(states)
		states = append(states, st)
	}
	interval := func(moment uint64) {
		if opts.Since.Seq > 0 && moment <= opts.Since.Seq {
			return
		}
		// The durable image is frozen as this interval's base; the next
		// interval changes a clone of it.
		base := durable
		durable = durable.clone()
		emit(base, "", nil, moment)
		fresh := len(pending)
		for fresh > 0 && pending[fresh-1] > last {
			fresh--
		}
		since := pending[fresh:]
		for j := range since {
			kept := closure(ops, pending, func(p int) bool { return p == fresh+j })
			emit(base, fmt.Sprintf("+op%d", ops[since[j]].Seq), kept, moment)
		}
		for n := 1; n <= len(since); n++ {
			kept := closure(ops, pending, func(p int) bool { return p >= fresh && p < fresh+n })
			emit(base, fmt.Sprintf("+first%d", n), kept, moment)
		}
		if len(pending) > 0 {
			emit(base, "+all", pending, moment)
		}
		for r := range max(opts.Subsets, 0) {
			if len(pending) < 2 {
				break
			}
			rng := rand.New(rand.NewPCG(opts.Seed, uint64(boundary)<<20|uint64(r)))
			pick := make([]bool, len(pending))
			for p := range pick {
				pick[p] = rng.IntN(2) == 0
			}
			emit(base, fmt.Sprintf("+rand%d", r), closure(ops, pending, func(p int) bool { return pick[p] }), moment)
		}
	}

	for i := range ops {
		op := &ops[i]
		switch {
		case op.Kind.data(), op.Kind.entry():
			pending = append(pending, i)
		case op.Kind == OpChmod:
			durable.apply(op)
		case op.Kind.Boundary():
			interval(op.Seq)
			var made []int
			if op.Kind == OpSyncDir {
				made = closure(ops, pending, func(p int) bool {
					o := &ops[pending[p]]
					return o.Kind.entry() && (o.dir == op.node || o.dir2 == op.node)
				})
			} else {
				made = closure(ops, pending, func(p int) bool {
					o := &ops[pending[p]]
					return o.Kind.data() && o.node == op.node
				})
			}
			for _, m := range made {
				durable.apply(&ops[m])
			}
			pending = slices.DeleteFunc(pending, func(p int) bool {
				_, found := slices.BinarySearch(made, p)
				return found
			})
			boundary++
			last = i
		}
	}
	interval(math.MaxUint64)
	return states
}

// Materialize writes the state as a plain directory tree at dir, which must
// not exist or be empty, for the test to open normally.
func (s *CrashState) Materialize(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("crashfs: materialize %s: %w", s.Name, err)
	}
	if ents, err := os.ReadDir(dir); err != nil {
		return fmt.Errorf("crashfs: materialize %s: %w", s.Name, err)
	} else if len(ents) > 0 {
		return fmt.Errorf("%w: %s has %d entries (materialize %s)", ErrNotEmpty, dir, len(ents), s.Name)
	}
	var err error
	var dirs []string // to chmod after their content is written
	var dirModes []uint32
	s.img.walk(func(path string, id ino, in *inode, first string) {
		if err != nil {
			return
		}
		p := filepath.Join(dir, filepath.FromSlash(path))
		if first != "" {
			err = os.Link(filepath.Join(dir, filepath.FromSlash(first)), p)
			return
		}
		switch in.kind {
		case kindDir:
			if path != "" {
				err = os.Mkdir(p, 0o700)
			}
			dirs, dirModes = append(dirs, p), append(dirModes, in.mode)
		case kindFile:
			err = writeFile(p, in)
		case kindSymlink:
			err = os.Symlink(in.target, p)
		case kindFifo:
			err = unix.Mkfifo(p, in.mode)
		case kindSocket:
			err = unix.Mknod(p, unix.S_IFSOCK|in.mode, 0)
		}
		if err == nil && in.kind != kindDir && in.kind != kindSymlink {
			err = os.Chmod(p, fs.FileMode(in.mode&0o777))
		}
	})
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = os.Chmod(dirs[i], fs.FileMode(dirModes[i]&0o777))
	}
	if err != nil {
		return fmt.Errorf("crashfs: materialize %s: %w", s.Name, err)
	}
	return nil
}

func writeFile(p string, in *inode) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	for pi, pg := range in.pages {
		off := pi * pageSize
		if off >= in.size {
			continue
		}
		if _, err := f.WriteAt(pg.data[:min(pageSize, in.size-off)], off); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Truncate(in.size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadFile returns the content of the file at path (slash-separated,
// relative to the mount) in this state, without materialising it;
// fs.ErrNotExist if the state has no such file.
func (s *CrashState) ReadFile(path string) ([]byte, error) {
	id := rootIno
	for part := range strings.SplitSeq(strings.Trim(path, "/"), "/") {
		d := s.img.nodes[id]
		if d == nil || d.kind != kindDir {
			return nil, fmt.Errorf("crashfs: %s in %s: %w", path, s.Name, fs.ErrNotExist)
		}
		next, ok := d.entries[part]
		if !ok {
			return nil, fmt.Errorf("crashfs: %s in %s: %w", path, s.Name, fs.ErrNotExist)
		}
		id = next
	}
	in := s.img.nodes[id]
	if in == nil || in.kind != kindFile {
		return nil, fmt.Errorf("crashfs: %s in %s is not a regular file: %w", path, s.Name, errors.ErrUnsupported)
	}
	return in.content(), nil
}
