//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Cgroup is one task cgroup on a host: a Location resolved to a directory
// in each of its hierarchies. Its methods hold no state beyond that, so it
// is safe for concurrent use, and a Cgroup opened by another process (a
// recovering driver) acts on the same cgroup.
type Cgroup struct {
	loc  Location
	dirs []cgDir // in location order
}

// cgDir is one hierarchy's directory of the cgroup.
type cgDir struct {
	key     string
	version Version
	path    string // the hierarchy path
	dir     string // the directory
	ctrls   []Controller
	kill    bool // cgroup2: cgroup.kill exists
	freeze  bool // cgroup2: cgroup.freeze exists
}

func (d cgDir) parent() string { return path.Dir(d.dir) }

// Open resolves loc against host h, touching nothing: for a recorded
// location (kill, remove, stats) or one Create made. A location that names
// a hierarchy h does not mount is an error wrapping ErrNoHierarchy.
func Open(h Host, loc Location) (*Cgroup, error) {
	if loc.IsZero() {
		return nil, fmt.Errorf("%w: empty location", ErrBadLocation)
	}
	c := &Cgroup{loc: loc}
	for _, e := range loc.entries {
		hi, ok := h.hierarchy(e.key)
		if !ok {
			return nil, fmt.Errorf("%w: location %s names the %s hierarchy, which this host does not mount (layout %s)", ErrNoHierarchy, loc, e.key, h.Layout)
		}
		dir, ok := hi.dir(e.path)
		if !ok {
			return nil, fmt.Errorf("%w: %s is outside the %s hierarchy mounted at %s (root %s)", ErrBadLocation, e.path, e.key, hi.Mount, hi.Root)
		}
		c.dirs = append(c.dirs, cgDir{key: e.key, version: hi.Version, path: e.path, dir: dir,
			ctrls: slices.Clone(hi.Controllers), kill: hi.Kill, freeze: hi.Freeze})
	}
	return c, nil
}

// OpenRecorded opens the cgroup of a location recorded in the event log,
// after checking that it is the one for task and nonce (from the same log):
// the way a recovering driver or an executor's reaper gets a cgroup it may
// kill. Errors wrap ErrBadLocation, ErrNotOurs or ErrNoHierarchy; nothing
// is touched.
func OpenRecorded(h Host, recorded, task, nonce string) (*Cgroup, error) {
	loc, err := ParseLocation(recorded)
	if err != nil {
		return nil, err
	}
	if err := loc.Check(task, nonce); err != nil {
		return nil, err
	}
	return Open(h, loc)
}

// Location returns the cgroup's location.
func (c *Cgroup) Location() Location { return c.loc }

// Dirs returns the cgroup's directory in each hierarchy, by hierarchy key.
func (c *Cgroup) Dirs() map[string]string {
	m := make(map[string]string, len(c.dirs))
	for _, d := range c.dirs {
		m[d.key] = d.dir
	}
	return m
}

func (c *Cgroup) byKey(key string) (cgDir, bool) {
	for _, d := range c.dirs {
		if d.key == key {
			return d, true
		}
	}
	return cgDir{}, false
}

// serving returns the cgroup's directory that serves controller ctrl: a v1
// hierarchy that mounts it, else the cgroup2 one (as Host.For chooses).
func (c *Cgroup) serving(ctrl Controller) (cgDir, bool) {
	for _, d := range c.dirs {
		if d.version == V1 && slices.Contains(d.ctrls, ctrl) {
			return d, true
		}
	}
	for _, d := range c.dirs {
		if d.version == V2 && slices.Contains(d.ctrls, ctrl) {
			return d, true
		}
	}
	return cgDir{}, false
}

// Create makes the cgroup at loc in every hierarchy and sets lim, before
// any process joins it. It is idempotent: creating the same location again
// (a launch retried after a crash) keeps the directories and writes the
// same values. On error it removes the directories it made.
//
// Errors: ErrUnavailable (Host.Usable); ErrBadLimits; *LimitError (wraps
// ErrNoController) for a limit whose controller h lacks, before anything is
// made; ErrNoHierarchy; and the kernel's refusals, wrapped.
func Create(h Host, loc Location, lim Limits) (*Cgroup, error) {
	if err := h.Usable(); err != nil {
		return nil, err
	}
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	c, err := Open(h, loc)
	if err != nil {
		return nil, err
	}
	for _, n := range lim.needs() {
		hi, why, ok := h.For(n.c)
		if !ok {
			return nil, &LimitError{Limit: n.limit, Controller: n.c, Why: why}
		}
		if _, ok := c.byKey(hi.Key); !ok {
			return nil, &LimitError{Limit: n.limit, Controller: n.c, Why: "location " + loc.String() + " has no " + hi.Key + " hierarchy"}
		}
	}
	if err := c.enableV2(h, lim); err != nil {
		return nil, err
	}
	var made []cgDir
	fail := func(err error) (*Cgroup, error) {
		for _, d := range slices.Backward(made) {
			_ = unix.Rmdir(d.dir)
		}
		return nil, err
	}
	existed := map[string]bool{}
	for _, d := range c.dirs {
		switch err := unix.Mkdir(d.dir, 0o755); {
		case err == nil:
			made = append(made, d)
		case errors.Is(err, unix.EEXIST):
			existed[d.key] = true
		default:
			return fail(fmt.Errorf("cgroup: create %s: %w", d.dir, err))
		}
	}
	cpus, mems, err := c.cpuset(lim, existed)
	if err != nil {
		return fail(err)
	}
	where := func(ctrl Controller) (string, Version, bool) {
		d, ok := c.serving(ctrl)
		return d.key, d.version, ok
	}
	if err := c.apply(planLimits(lim, where, cpus, mems)); err != nil {
		return fail(err)
	}
	return c, nil
}

// enableV2 enables, in the cgroup2 parent's cgroup.subtree_control, the
// controllers the task cgroup gets there: those the limits need (an error
// if that fails) and memory and pids for stats and the OOM count (best
// effort).
func (c *Cgroup) enableV2(h Host, lim Limits) error {
	u, ok := h.Unified()
	if !ok || len(u.Controllers) == 0 {
		return nil
	}
	d, ok := c.byKey(UnifiedKey)
	if !ok {
		return nil
	}
	need := map[Controller]string{}
	for _, n := range lim.needs() {
		if hi, _, ok := h.For(n.c); ok && hi.Version == V2 {
			need[n.c] = n.limit
		}
	}
	sc := d.parent() + "/cgroup.subtree_control"
	b, err := os.ReadFile(sc)
	if err != nil {
		return fmt.Errorf("cgroup: read %s: %w", sc, err)
	}
	on := strings.Fields(string(b))
	for _, ctrl := range u.Controllers {
		limit, required := need[ctrl]
		if slices.Contains(on, string(ctrl)) || !required && ctrl != Memory && ctrl != Pids {
			continue
		}
		if err := writeFile(d.parent(), "cgroup.subtree_control", "+"+string(ctrl)); err != nil && required {
			return &LimitError{Limit: limit, Controller: ctrl, Why: fmt.Sprintf("enabling it in %s failed: %v", sc, err)}
		}
	}
	return nil
}

// cpuset returns the values for cpuset.cpus and cpuset.mems: lim.Cores
// CPUs of the parent's (kept if the cgroup existed with that many), or on
// v1 without Cores all of the parent's; mems are the parent's.
func (c *Cgroup) cpuset(lim Limits, existed map[string]bool) (cpus, mems string, err error) {
	d, ok := c.serving(CPUSet)
	if !ok || d.version == V2 && lim.Cores == 0 {
		return "", "", nil
	}
	cpusFile, memsFile := "cpuset.cpus", "cpuset.mems"
	if d.version == V2 {
		cpusFile, memsFile = "cpuset.cpus.effective", "cpuset.mems.effective"
	}
	parentCPUs, err := readString(d.parent(), cpusFile)
	if err != nil {
		return "", "", err
	}
	if d.version == V1 {
		if mems, err = readString(d.parent(), memsFile); err != nil {
			return "", "", err
		}
	}
	if lim.Cores == 0 {
		return parentCPUs, mems, nil
	}
	avail, err := parseCPUList(parentCPUs)
	if err != nil {
		return "", "", err
	}
	if lim.Cores > len(avail) {
		return "", "", fmt.Errorf("%w: cores = %d, but the parent cgroup %s has %d CPUs (%s)", ErrBadLimits, lim.Cores, d.parent(), len(avail), parentCPUs)
	}
	if existed[d.key] {
		if cur, err := readString(d.dir, "cpuset.cpus"); err == nil {
			if got, err := parseCPUList(cur); err == nil && len(got) == lim.Cores {
				return cur, mems, nil
			}
		}
	}
	return formatCPUList(chooseCPUs(avail, lim.Cores, siblingPins(d))), mems, nil
}

// siblingPins counts, for each CPU, the other tether task cgroups beside d
// pinned to it.
func siblingPins(d cgDir) map[int]int {
	use := map[int]int{}
	ents, err := os.ReadDir(d.parent())
	if err != nil {
		return use
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == path.Base(d.dir) || !strings.HasPrefix(e.Name(), leafPrefix) {
			continue
		}
		s, err := readString(d.parent()+"/"+e.Name(), "cpuset.cpus")
		if err != nil {
			continue
		}
		cpus, _ := parseCPUList(s)
		for _, cpu := range cpus {
			use[cpu]++
		}
	}
	return use
}

// apply performs the writes. A v1 hard memory limit above the current
// memory+swap limit is refused with EINVAL until memsw is raised, so on
// EINVAL the memsw write goes first.
func (c *Cgroup) apply(ws []write) error {
	for i, w := range ws {
		d, _ := c.byKey(w.key)
		err := writeFile(d.dir, w.file, w.value)
		if err != nil && w.file == "memory.limit_in_bytes" && errors.Is(err, unix.EINVAL) && i+1 < len(ws) && ws[i+1].file == "memory.memsw.limit_in_bytes" {
			if writeFile(d.dir, ws[i+1].file, ws[i+1].value) == nil {
				err = writeFile(d.dir, w.file, w.value)
			}
		}
		if err != nil && w.optional && isNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Join moves the calling process (all its threads) into the cgroup in
// every hierarchy. The executor's init shim calls it before it execs the
// task, so the task's first instruction runs inside.
func (c *Cgroup) Join() error { return c.Add(os.Getpid()) }

// Add moves process pid (all its threads) into the cgroup in every
// hierarchy.
func (c *Cgroup) Add(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroup: add pid %d: not a process", pid)
	}
	p := strconv.Itoa(pid)
	for _, d := range c.dirs {
		if err := writeFile(d.dir, "cgroup.procs", p); err != nil {
			return err
		}
	}
	return nil
}

// UnifiedDir opens the cgroup's cgroup2 directory for CLONE_INTO_CGROUP:
//
//	f, err := cg.UnifiedDir()
//	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd())}
//	err = cmd.Start()
//	f.Close()
//
// The child starts in the cgroup2 cgroup. On a pure v2 host that is the
// whole cgroup; on a hybrid host clone3 places the child only in the
// unified hierarchy, so it must still Join (the v1 hierarchies). The caller
// closes f. ErrNoUnified when the location has no cgroup2 part.
func (c *Cgroup) UnifiedDir() (*os.File, error) {
	d, ok := c.byKey(UnifiedKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoUnified, c.loc)
	}
	fd, err := unix.Open(d.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", d.dir, err)
	}
	return os.NewFile(uintptr(fd), d.dir), nil
}

// Procs returns the pids of the cgroup's live processes, in every
// hierarchy and in any cgroup a member made below it, sorted. A cgroup
// that is gone has none.
func (c *Cgroup) Procs() ([]int, error) {
	var all []int
	for _, d := range c.dirs {
		pids, err := procsBelow(d.dir)
		if err != nil {
			return nil, err
		}
		all = append(all, pids...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// procsBelow reads cgroup.procs of dir and of every cgroup below it.
func procsBelow(dir string) ([]int, error) {
	b, err := os.ReadFile(dir + "/cgroup.procs")
	if err != nil {
		if isNotExist(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("cgroup: read %s/cgroup.procs: %w", dir, err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup: %s/cgroup.procs: bad pid %q", dir, f)
		}
		pids = append(pids, pid)
	}
	ents, err := os.ReadDir(dir)
	if err != nil && !isNotExist(err) {
		return nil, fmt.Errorf("cgroup: read %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			sub, err := procsBelow(dir + "/" + e.Name())
			if err != nil {
				return nil, err
			}
			pids = append(pids, sub...)
		}
	}
	return pids, nil
}

// Remove removes the cgroup's directories in every hierarchy, and any
// cgroup a member made below them. Idempotent: a directory already gone is
// fine. A cgroup that still has live members is refused with a *KillError
// naming them (Kill first).
func (c *Cgroup) Remove() error {
	var errs []error
	for _, d := range c.dirs {
		if err := rmdirAll(d.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func rmdirAll(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return fmt.Errorf("cgroup: remove %s: %w", dir, err)
	}
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirAll(dir + "/" + e.Name()); err != nil {
				return err
			}
		}
	}
	switch err := unix.Rmdir(dir); {
	case err == nil, errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.EBUSY):
		pids, _ := procsBelow(dir)
		return &KillError{Dir: dir, Alive: describe(pids), Err: fmt.Errorf("rmdir: %w", err)}
	default:
		return fmt.Errorf("cgroup: remove %s: %w", dir, err)
	}
}

// writeFile writes value to dir/file in one write(2), as cgroupfs wants.
func writeFile(dir, file, value string) error {
	p := dir + "/" + file
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, p, err)
	}
	_, err = unix.Write(fd, []byte(value))
	cerr := unix.Close(fd)
	if err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, p, err)
	}
	return nil
}

// readString reads dir/file, trimmed.
func readString(dir, file string) (string, error) {
	b, err := os.ReadFile(dir + "/" + file)
	if err != nil {
		return "", fmt.Errorf("cgroup: read %s/%s: %w", dir, file, err)
	}
	return strings.TrimSpace(string(b)), nil
}
