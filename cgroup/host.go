//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Version is a cgroup hierarchy's version.
type Version int

// Cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// Layout is how a host mounts its cgroups.
type Layout int

// Host layouts.
const (
	// LayoutNone: no cgroup hierarchy tether can use is mounted.
	LayoutNone Layout = iota
	// LayoutV1: only cgroup v1 controller hierarchies.
	LayoutV1
	// LayoutHybrid: v1 controller hierarchies and a cgroup2 hierarchy
	// beside them (systemd's hybrid mode, /sys/fs/cgroup/unified).
	LayoutHybrid
	// LayoutV2: only the cgroup2 unified hierarchy.
	LayoutV2
)

func (l Layout) String() string {
	switch l {
	case LayoutNone:
		return "none"
	case LayoutV1:
		return "v1"
	case LayoutHybrid:
		return "hybrid"
	case LayoutV2:
		return "v2"
	}
	return "Layout(" + strconv.Itoa(int(l)) + ")"
}

// MarshalText writes the layout's name, so JSON shows "hybrid".
func (l Layout) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Controller is the name of a cgroup controller.
type Controller string

// The controllers tether uses. On cgroup2, cpuacct and freezer are not
// controllers: cpu.stat and cgroup.freeze are in every cgroup.
const (
	Memory  Controller = "memory"
	CPU     Controller = "cpu"
	CPUAcct Controller = "cpuacct"
	CPUSet  Controller = "cpuset"
	Pids    Controller = "pids"
	Freezer Controller = "freezer"
)

// used lists the v1 controllers whose hierarchies a task cgroup spans.
var used = []Controller{CPU, CPUAcct, CPUSet, Freezer, Memory, Pids}

// v2Used lists the cgroup2 controllers tether enables for a task cgroup.
var v2Used = []Controller{CPU, CPUSet, Memory, Pids}

// UnifiedKey is the key of the cgroup2 hierarchy in a Host and a Location.
// A v1 hierarchy's key is its controller list as /proc/self/cgroup shows
// it ("memory", "cpu,cpuacct").
const UnifiedKey = "unified"

// Hierarchy is one mounted cgroup hierarchy, as seen by the probing process.
type Hierarchy struct {
	// Key names the hierarchy: UnifiedKey, or the v1 controller list.
	Key     string  `json:"key"`
	Version Version `json:"version"`
	// Controllers are the controllers a task cgroup gets here: for v1 the
	// mounted ones; for cgroup2 those the parent of task cgroups lists in
	// cgroup.controllers and can enable for them.
	Controllers []Controller `json:"controllers"`
	// Enabled (cgroup2 only) are the controllers already in the parent's
	// cgroup.subtree_control.
	Enabled []Controller `json:"enabled,omitempty"`
	// Mount is the mount point, Root the hierarchy path mounted there (the
	// fourth field of mountinfo; "/" unless a container bind-mounted a
	// subtree).
	Mount string `json:"mount"`
	Root  string `json:"root"`
	// Path is the probing process's own cgroup here (from /proc/PID/cgroup).
	Path string `json:"path"`
	// Parent is where task cgroups go: Path, except on a cgroup2 hierarchy
	// with controllers, where it is Path's parent (see the package doc).
	Parent string `json:"parent"`
	// ReadOnly is set when the cgroupfs is mounted read-only; Writable when
	// this process may create cgroups in Parent.
	ReadOnly bool `json:"read_only"`
	Writable bool `json:"writable"`
	// Kill, Freeze and Events (cgroup2 only) tell whether non-root cgroups
	// have cgroup.kill (kernel 5.14), cgroup.freeze (5.2) and cgroup.events.
	Kill   bool `json:"kill,omitempty"`
	Freeze bool `json:"freeze,omitempty"`
	Events bool `json:"events,omitempty"`
	// Note says why Parent differs from Path, or what limits this hierarchy.
	Note string `json:"note,omitempty"`
}

// Has reports whether the hierarchy carries controller c.
func (hi *Hierarchy) Has(c Controller) bool { return slices.Contains(hi.Controllers, c) }

// dir is the directory of cgroup p (a path in this hierarchy). ok is false
// when p lies outside the mounted subtree.
func (hi *Hierarchy) dir(p string) (string, bool) {
	rel, ok := relTo(hi.Root, p)
	if !ok {
		return "", false
	}
	return path.Join(hi.Mount, rel), true
}

// Host is a host's cgroup layout as one process sees it. Probe reads it; a
// test may construct or trim one (Without) to act on another layout.
type Host struct {
	Layout Layout `json:"layout"`
	// UID is the probing process's effective uid.
	UID int `json:"uid"`
	// Hierarchies are the hierarchies tether uses, sorted by Key: each v1
	// hierarchy with a controller tether uses, and the unified one.
	Hierarchies []Hierarchy `json:"hierarchies"`
}

// Probe reads this process's cgroup layout from /proc/self/mountinfo,
// /proc/self/cgroup and the cgroup files. It fails only when those cannot
// be read; a host without usable cgroups yields a Host whose Usable says
// why.
func Probe() (Host, error) { return probeEnv{proc: "self"}.probe() }

// ProbeFor reads the layout as process pid sees it (its mounts and its own
// cgroups, from /proc/PID), with writability and the uid of this process:
// a driver computes the location of a task cgroup below its executor (pid)
// and records it before the executor creates it.
func ProbeFor(pid int) (Host, error) {
	if pid <= 0 {
		return Host{}, fmt.Errorf("cgroup: probe pid %d: not a process", pid)
	}
	return probeEnv{proc: strconv.Itoa(pid)}.probe()
}

// probeEnv is where the probe reads from: /proc/<proc>; a test points root
// at a directory holding a layout of its own.
type probeEnv struct {
	root   string
	proc   string
	uid    int
	kernel [2]int
}

func (e probeEnv) probe() (Host, error) {
	if e.proc == "" {
		e.proc = "self"
	}
	mi, err := os.ReadFile(e.root + "/proc/" + e.proc + "/mountinfo")
	if err != nil {
		return Host{}, fmt.Errorf("cgroup: probe: %w", err)
	}
	pc, err := os.ReadFile(e.root + "/proc/" + e.proc + "/cgroup")
	if err != nil {
		return Host{}, fmt.Errorf("cgroup: probe: %w", err)
	}
	mounts, err := parseMountinfo(mi)
	if err != nil {
		return Host{}, err
	}
	own, err := parseProcCgroup(pc)
	if err != nil {
		return Host{}, err
	}
	if e.root == "" {
		e.uid = os.Geteuid()
		e.kernel = kernelVersion()
	}
	h := Host{UID: e.uid}
	for _, l := range own {
		if l.key == UnifiedKey {
			if hi, ok := e.unified(mounts, l.path); ok {
				h.Hierarchies = append(h.Hierarchies, hi)
			}
			continue
		}
		if hi, ok := e.v1(mounts, l); ok {
			h.Hierarchies = append(h.Hierarchies, hi)
		}
	}
	slices.SortFunc(h.Hierarchies, func(a, b Hierarchy) int { return strings.Compare(a.Key, b.Key) })
	h.Layout = layoutOf(h.Hierarchies)
	return h, nil
}

func layoutOf(hs []Hierarchy) Layout {
	var v1, v2 bool
	for _, hi := range hs {
		v1 = v1 || hi.Version == V1
		v2 = v2 || hi.Version == V2
	}
	switch {
	case v1 && v2:
		return LayoutHybrid
	case v1:
		return LayoutV1
	case v2:
		return LayoutV2
	}
	return LayoutNone
}

// v1 builds the hierarchy of one v1 line of /proc/self/cgroup, if it
// carries a controller tether uses and is mounted.
func (e probeEnv) v1(mounts []mount, l ownLine) (Hierarchy, bool) {
	ctrls := strings.Split(l.key, ",")
	var mine []Controller
	for _, c := range ctrls {
		if slices.Contains(used, Controller(c)) {
			mine = append(mine, Controller(c))
		}
	}
	if len(mine) == 0 {
		return Hierarchy{}, false
	}
	for _, m := range mounts {
		if m.fstype != "cgroup" || !sameSet(m.controllers(), ctrls) {
			continue
		}
		if _, ok := relTo(m.root, l.path); !ok {
			continue
		}
		hi := Hierarchy{Key: l.key, Version: V1, Controllers: mine, Mount: m.point, Root: m.root,
			Path: l.path, Parent: l.path, ReadOnly: m.readOnly}
		dir, _ := hi.dir(hi.Parent)
		hi.Writable = !hi.ReadOnly && e.writable(dir)
		return hi, true
	}
	return Hierarchy{}, false
}

// unified builds the cgroup2 hierarchy and decides where task cgroups go.
func (e probeEnv) unified(mounts []mount, own string) (Hierarchy, bool) {
	for _, m := range mounts {
		if m.fstype != "cgroup2" {
			continue
		}
		rel, ok := relTo(m.root, own)
		if !ok {
			continue
		}
		hi := Hierarchy{Key: UnifiedKey, Version: V2, Mount: m.point, Root: m.root, Path: own, Parent: own, ReadOnly: m.readOnly}
		ownDir := path.Join(m.point, rel)
		// The real root has no cgroup.events; a cgroup namespace's root does.
		realRoot := rel == "/" && !e.exists(ownDir+"/cgroup.events")
		ownCtrls := tetherV2(e.words(ownDir + "/cgroup.controllers"))
		switch {
		case realRoot:
			// The root may hold processes and still enable controllers.
		case len(ownCtrls) == 0:
			// No controller to hand down: nothing forbids nesting below us.
		case rel == "/":
			hi.Note = "this process is in the root of its cgroup namespace, which holds processes, so no controller can be enabled below it (cgroup2's no-internal-processes rule); move this process into a leaf cgroup to enforce limits"
		default:
			// Our cgroup holds processes (us, at least), so it cannot enable
			// controllers for children: task cgroups go beside it.
			hi.Parent = path.Dir(own)
			hi.Note = "task cgroups go beside this process's cgroup, below " + hi.Parent + ": a cgroup that holds processes cannot enable controllers for children (cgroup2's no-internal-processes rule)"
		}
		parentDir, _ := hi.dir(hi.Parent)
		parentIsRoot := hi.Parent == m.root && !e.exists(parentDir+"/cgroup.events") || realRoot
		hi.Enabled = tetherV2(e.words(parentDir + "/cgroup.subtree_control"))
		hi.Controllers = hi.Enabled
		switch {
		case hi.Parent == hi.Path && !realRoot:
			// Below ourselves: only what is already enabled (nothing, as we
			// are in it).
		case parentIsRoot || len(e.words(parentDir+"/cgroup.procs")) == 0:
			hi.Controllers = tetherV2(e.words(parentDir + "/cgroup.controllers"))
		case hi.Note == "":
			hi.Note = hi.Parent + " holds processes, so only the controllers it already enables can be used"
		}
		hi.Writable = !hi.ReadOnly && e.writable(parentDir) && e.writable(parentDir+"/cgroup.procs")
		hi.Kill, hi.Freeze, hi.Events = e.v2Features(parentDir, parentIsRoot)
		return hi, true
	}
	return Hierarchy{}, false
}

// v2Features tells whether non-root cgroups have cgroup.kill, cgroup.freeze
// and cgroup.events: from a non-root cgroup's files where one is at hand,
// else from the kernel version.
func (e probeEnv) v2Features(parentDir string, parentIsRoot bool) (kill, freeze, events bool) {
	sample := parentDir
	if parentIsRoot {
		sample = firstSubdir(parentDir)
	}
	if sample != "" {
		return e.exists(sample + "/cgroup.kill"), e.exists(sample + "/cgroup.freeze"), e.exists(sample + "/cgroup.events")
	}
	k := e.kernel
	atLeast := func(maj, min int) bool { return k[0] > maj || k[0] == maj && k[1] >= min }
	return atLeast(5, 14), atLeast(5, 2), atLeast(4, 5)
}

// firstSubdir is dir's first subdirectory ("" if none), read a few
// entries at a time rather than the whole listing.
func firstSubdir(dir string) string {
	f, err := os.Open(dir)
	if err != nil {
		return ""
	}
	defer f.Close()
	for {
		ents, err := f.ReadDir(16)
		for _, d := range ents {
			if d.IsDir() {
				return dir + "/" + d.Name()
			}
		}
		if err != nil {
			return ""
		}
	}
}

func (e probeEnv) exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// words returns the whitespace-separated words of a file (nil if unreadable).
func (e probeEnv) words(p string) []string {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	return strings.Fields(string(b))
}

func (e probeEnv) writable(p string) bool {
	mode := uint32(unix.W_OK)
	if isDir(p) {
		mode |= unix.X_OK
	}
	return unix.Faccessat(unix.AT_FDCWD, p, mode, unix.AT_EACCESS) == nil
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// tetherV2 keeps the cgroup2 controllers tether uses, in v2Used order.
func tetherV2(words []string) []Controller {
	var out []Controller
	for _, c := range v2Used {
		if slices.Contains(words, string(c)) {
			out = append(out, c)
		}
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// relTo returns p relative to root ("/" for root itself), if p is in it.
func relTo(root, p string) (string, bool) {
	switch {
	case root == "/":
		return p, strings.HasPrefix(p, "/")
	case p == root:
		return "/", true
	case strings.HasPrefix(p, root+"/"):
		return p[len(root):], true
	}
	return "", false
}

// kernelVersion returns the running kernel's major and minor version.
func kernelVersion() [2]int {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return [2]int{}
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var v [2]int
	for i, f := range strings.SplitN(rel, ".", 3) {
		if i > 1 {
			break
		}
		n := 0
		for _, r := range f {
			if r < '0' || r > '9' {
				break
			}
			n = n*10 + int(r-'0')
		}
		v[i] = n
	}
	return v
}

// mount is one cgroup line of /proc/self/mountinfo.
type mount struct {
	root, point, fstype string
	super               []string
	readOnly            bool
}

// controllers returns a v1 mount's controllers (its super options less the
// generic ones and named hierarchies).
func (m mount) controllers() []string {
	var out []string
	for _, o := range m.super {
		switch {
		case o == "rw", o == "ro", o == "noprefix", o == "clone_children", o == "xattr", o == "cpuset_v2_mode", o == "favordynmods",
			strings.Contains(o, "="):
			continue
		}
		out = append(out, o)
	}
	return out
}

// parseMountinfo returns the cgroup and cgroup2 mounts of a mountinfo text.
func parseMountinfo(b []byte) ([]mount, error) {
	var out []mount
	// The text is in memory already: split it in place (a bufio.Scanner's
	// buffer was the probe's largest allocation, and stays resident in an
	// idle executor).
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("cgroup: probe: malformed mountinfo line %q", line)
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 3 {
			return nil, fmt.Errorf("cgroup: probe: malformed mountinfo line %q", line)
		}
		if g[0] != "cgroup" && g[0] != "cgroup2" {
			continue
		}
		m := mount{root: unescapeMount(f[3]), point: unescapeMount(f[4]), fstype: g[0], super: strings.Split(g[2], ",")}
		m.readOnly = slices.Contains(strings.Split(f[5], ","), "ro") || slices.Contains(m.super, "ro")
		out = append(out, m)
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// ownLine is one line of /proc/PID/cgroup: a hierarchy key and a path.
type ownLine struct{ key, path string }

// parseProcCgroup parses /proc/PID/cgroup ("id:controllers:path" lines;
// the cgroup2 line is "0::path" and gets UnifiedKey).
func parseProcCgroup(b []byte) ([]ownLine, error) {
	var out []ownLine
	for line := range strings.SplitSeq(strings.TrimRight(string(b), "\n"), "\n") {
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return nil, fmt.Errorf("cgroup: malformed /proc cgroup line %q", line)
		}
		key := parts[1]
		if parts[0] == "0" && key == "" {
			key = UnifiedKey
		}
		out = append(out, ownLine{key: key, path: parts[2]})
	}
	return out, nil
}

// ProcCgroups returns the cgroup paths of process pid (0: this process) by
// hierarchy key, from /proc/PID/cgroup.
func ProcCgroups(pid int) (map[string]string, error) {
	p := "/proc/self/cgroup"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/cgroup"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	lines, err := parseProcCgroup(b)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(lines))
	for _, l := range lines {
		out[l.key] = l.path
	}
	return out, nil
}

// hierarchy returns the hierarchy with the given key.
func (h Host) hierarchy(key string) (*Hierarchy, bool) {
	for i := range h.Hierarchies {
		if h.Hierarchies[i].Key == key {
			return &h.Hierarchies[i], true
		}
	}
	return nil, false
}

// Unified returns the cgroup2 hierarchy, if the host has one.
func (h Host) Unified() (*Hierarchy, bool) { return h.hierarchy(UnifiedKey) }

// For returns the hierarchy that serves controller c: a v1 hierarchy that
// mounts it, else the cgroup2 one if it can enable it. why says what is
// missing when ok is false.
func (h Host) For(c Controller) (hi *Hierarchy, why string, ok bool) {
	for i := range h.Hierarchies {
		if x := &h.Hierarchies[i]; x.Version == V1 && x.Has(c) {
			return x, "", true
		}
	}
	u, hasU := h.Unified()
	if hasU && u.Has(c) {
		return u, "", true
	}
	why = "no cgroup v1 hierarchy mounts it"
	switch {
	case !hasU:
		why += " and there is no cgroup2 hierarchy"
	case c == CPUAcct || c == Freezer:
		why += " (on cgroup2 it is no controller)"
	default:
		why += " and cgroup2's " + u.Parent + " cannot enable it for children (not in its cgroup.controllers, or it holds processes)"
		if u.Note != "" && u.Parent == u.Path {
			why += ": " + u.Note
		}
	}
	return nil, why, false
}

// KillMethod says how Kill empties a task cgroup on this host:
// "cgroup.kill", "cgroup.freeze" (cgroup2 freeze, SIGKILL each, thaw),
// "freezer" (the v1 freezer), or "" when there is no way.
func (h Host) KillMethod() string {
	if u, ok := h.Unified(); ok {
		if u.Kill {
			return "cgroup.kill"
		}
		if u.Freeze {
			return "cgroup.freeze"
		}
	}
	if _, _, ok := h.For(Freezer); ok {
		return "freezer"
	}
	return ""
}

// Usable returns nil when this process can create, kill and remove task
// cgroups, else an error wrapping ErrUnavailable that says why.
func (h Host) Usable() error {
	if len(h.Hierarchies) == 0 {
		return fmt.Errorf("%w: no cgroup hierarchy is mounted (no cgroup or cgroup2 entry in /proc/self/mountinfo that holds this process's cgroups)", ErrUnavailable)
	}
	if h.KillMethod() == "" {
		return fmt.Errorf("%w: no way to kill a whole cgroup: no cgroup2 hierarchy with cgroup.kill or cgroup.freeze and no v1 freezer hierarchy; mount the freezer controller", ErrUnavailable)
	}
	for _, hi := range h.Hierarchies {
		dir, _ := hi.dir(hi.Parent)
		switch {
		case hi.ReadOnly:
			return fmt.Errorf("%w: read-only cgroupfs: %s is mounted read-only (a container without cgroup delegation?)", ErrUnavailable, hi.Mount)
		case hi.Writable:
		case h.UID != 0:
			return fmt.Errorf("%w: not root (uid %d) and %s is not writable by this user: no cgroup delegation; run as root or delegate that cgroup to uid %d", ErrUnavailable, h.UID, dir, h.UID)
		default:
			return fmt.Errorf("%w: %s is not writable even as root (a user namespace without a delegated cgroup?)", ErrUnavailable, dir)
		}
	}
	return nil
}

// Without returns a copy of h without the hierarchies with the given keys
// (UnifiedKey for cgroup2): to use a host without part of its layout, as a
// test of the v1 kill path does. With no key it is a copy that shares
// nothing with h.
func (h Host) Without(keys ...string) Host {
	out := Host{UID: h.UID}
	for _, hi := range h.Hierarchies {
		if !slices.Contains(keys, hi.Key) {
			hi.Controllers, hi.Enabled = slices.Clone(hi.Controllers), slices.Clone(hi.Enabled)
			out.Hierarchies = append(out.Hierarchies, hi)
		}
	}
	out.Layout = layoutOf(out.Hierarchies)
	return out
}

// String is the report for `tether debug host`: the layout, each hierarchy,
// how each limit is enforced, how a cgroup is killed, and what is missing
// and why.
func (h Host) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cgroup layout: %s (uid %d)\n", h.Layout, h.UID)
	if err := h.Usable(); err != nil {
		fmt.Fprintf(&b, "task cgroups: no: %v\n", err)
	} else {
		b.WriteString("task cgroups: yes\n")
	}
	for _, hi := range h.Hierarchies {
		ctrls := joinCtrls(hi.Controllers)
		fmt.Fprintf(&b, "  %-10s v%d at %s, own %s, tasks below %s, controllers: %s", hi.Key, hi.Version, hi.Mount, hi.Path, hi.Parent, ctrls)
		if hi.Version == V2 {
			fmt.Fprintf(&b, ", cgroup.kill %s, cgroup.freeze %s, cgroup.events %s", yesNo(hi.Kill), yesNo(hi.Freeze), yesNo(hi.Events))
		}
		switch {
		case hi.ReadOnly:
			b.WriteString(", read-only")
		case !hi.Writable:
			b.WriteString(", not writable")
		}
		b.WriteString("\n")
		if hi.Note != "" {
			fmt.Fprintf(&b, "             %s\n", hi.Note)
		}
	}
	b.WriteString("limits:\n")
	for _, l := range []struct {
		name string
		c    Controller
	}{{"memory, memory_max", Memory}, {"cpu", CPU}, {"cores", CPUSet}, {"pids", Pids}} {
		if hi, why, ok := h.For(l.c); ok {
			fmt.Fprintf(&b, "  %-18s yes (%s, v%d)\n", l.name, l.c, hi.Version)
		} else {
			fmt.Fprintf(&b, "  %-18s no: %s controller: %s\n", l.name, l.c, why)
		}
	}
	switch m := h.KillMethod(); m {
	case "cgroup.kill":
		b.WriteString("kill: cgroup.kill, confirmed empty by cgroup.events\n")
	case "cgroup.freeze":
		b.WriteString("kill: cgroup.freeze, SIGKILL every member through a pidfd, thaw, until empty (no cgroup.kill: kernel < 5.14)\n")
	case "freezer":
		b.WriteString("kill: v1 freezer, SIGKILL every member through a pidfd, thaw, until cgroup.procs is empty\n")
	default:
		b.WriteString("kill: no: no cgroup.kill, no cgroup.freeze, no v1 freezer\n")
	}
	if hi, _, ok := h.For(Memory); ok {
		if hi.Version == V1 {
			b.WriteString("oom count: memory.oom_control oom_kill (kernel >= 4.13)\n")
		} else {
			b.WriteString("oom count: memory.events oom_kill\n")
		}
	} else {
		b.WriteString("oom count: no: no memory controller\n")
	}
	return b.String()
}

func joinCtrls(cs []Controller) string {
	if len(cs) == 0 {
		return "none"
	}
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// isNotExist reports a missing file or a cgroup that is gone.
func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENODEV)
}
