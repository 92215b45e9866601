//go:build linux

package shim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/statedir"
)

// maskedFiles are host files an exec task's root hides although a
// directory it binds holds them: each is covered by an empty file of mode
// 0000 (unreadable but to a task with CAP_DAC_OVERRIDE, which reads it
// empty). Patterns as filepath.Match takes them.
var maskedFiles = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/security/opasswd", "/etc/ssh/ssh_host_*_key",
}

// bindMount is one entry of a root: a bind mount of Src at Dst (a path in
// the root), or a symbolic link to Link made at Dst.
type BindMount struct {
	Src  string `json:"src,omitempty"`
	Dst  string `json:"dst"`
	File bool   `json:"file,omitempty"` // Src is a regular file
	Link string `json:"link,omitempty"`
}

// rootPlan is the exec task's root, computed by the executor and built by
// the shim in the task's mount namespace (so that every mount of it
// vanishes with the task: nothing is ever mounted in the host's namespace).
type RootPlan struct {
	Dir    string      `json:"dir"`    // the empty mount point it is built on
	System []BindMount `json:"system"` // read-only
	Task   []BindMount `json:"task"`   // writable: local, secrets, tmp, alloc
	Mask   []string    `json:"mask,omitempty"`
	Hide   []string    `json:"hide,omitempty"` // directories covered by an empty, read-only tmpfs
}

// PlanRoot computes the root of an exec task whose executor's directory
// is taskDir from chroot entries (nil: DefaultChroot, whose missing
// entries are skipped) and the task's own writable directories (its
// /local, /secrets, /tmp and /alloc, bound from where the executor made
// them).
func PlanRoot(taskDir string, task []BindMount, chroot []string) (*RootPlan, error) {
	explicit := chroot != nil
	if !explicit {
		chroot = spec.DefaultChroot
	}
	es, err := spec.ParseChroot(chroot)
	if err != nil {
		return nil, err
	}
	p := &RootPlan{Dir: filepath.Join(taskDir, statedir.RootDir)}
	type visible struct{ src, dst string } // a host directory and where the task sees it
	var seen []visible
	for _, e := range es {
		fi, err := os.Lstat(e.Src)
		if errors.Is(err, fs.ErrNotExist) && !explicit {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: chroot entry %s: %w", wire.ErrBadSpec, e.Src, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 && e.Src == e.Dst {
			// The same link in the root: it resolves there, against
			// the root's own binds.
			target, err := os.Readlink(e.Src)
			if err != nil {
				return nil, fmt.Errorf("%w: chroot entry %s: %w", wire.ErrBadSpec, e.Src, err)
			}
			p.System = append(p.System, BindMount{Dst: e.Dst, Link: target})
			continue
		}
		if fi, err = os.Stat(e.Src); err != nil {
			return nil, fmt.Errorf("%w: chroot entry %s: %w", wire.ErrBadSpec, e.Src, err)
		}
		switch {
		case fi.IsDir():
			p.System = append(p.System, BindMount{Src: e.Src, Dst: e.Dst})
		case fi.Mode().IsRegular():
			p.System = append(p.System, BindMount{Src: e.Src, Dst: e.Dst, File: true})
		default:
			return nil, fmt.Errorf("%w: chroot entry %s is a %s; bind directories and regular files", wire.ErrBadSpec, e.Src, fi.Mode().Type())
		}
		real, err := filepath.EvalSymlinks(e.Src)
		if err != nil {
			real = e.Src
		}
		seen = append(seen, visible{real, e.Dst}, visible{e.Src, e.Dst})
	}
	// Parents before children: a bind inside another lands on it.
	slices.SortStableFunc(p.System, func(a, b BindMount) int { return strings.Compare(a.Dst, b.Dst) })
	p.Task = task
	// inRoot is where the task would see host path h, if it sees it.
	inRoot := func(h string) (string, bool) {
		for _, v := range seen {
			if h == v.src {
				return v.dst, true
			}
			if rel, ok := strings.CutPrefix(h, v.src+"/"); ok {
				return filepath.Join(v.dst, rel), true
			}
		}
		return "", false
	}
	for _, pat := range maskedFiles {
		matches, _ := filepath.Glob(pat)
		for _, m := range matches {
			if fi, err := os.Lstat(m); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if dst, ok := inRoot(m); ok {
				p.Mask = append(p.Mask, dst)
			}
		}
	}
	// The state directory (the store and every task's directory) is never
	// visible: cover the outermost of them that a bind shows.
	state, tasks := filepath.Dir(filepath.Dir(taskDir)), filepath.Dir(taskDir)
	for _, h := range []string{state, tasks, taskDir} {
		real, err := filepath.EvalSymlinks(h)
		if err != nil {
			real = h
		}
		dst, ok := inRoot(real)
		if !ok {
			dst, ok = inRoot(h)
		}
		if ok && dst != "/" {
			p.Hide = append(p.Hide, dst)
			break
		}
	}
	return p, nil
}

// Mount flags of the root's parts.
const (
	roAttrs   = unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
	taskAttrs = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV
)

// devices are the host devices bound into an exec task's /dev.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// procMasked are /proc files covered by an empty file, and procReadOnly
// /proc entries made read-only, as runc does: a root task with the default
// capabilities must not reach the host's kernel through them.
var (
	procMasked   = []string{"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "timer_stats", "acpi", "scsi"}
	procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}
)

// build builds the root and pivots into it. It runs in the shim, in the
// task's fresh mount namespace (and PID namespace, for /proc), as root.
func (p *RootPlan) build() error {
	// The directories made on the way to a bind (/run of /run/resolvconf)
	// are 0755 whatever the executor's umask (077): the task's user must
	// traverse them. The task gets the umask it had.
	defer unix.Umask(unix.Umask(0o022))
	// Nothing mounted here may propagate to the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mount namespace private: %w", err)
	}
	root := p.Dir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return fmt.Errorf("mount the root's tmpfs on %s: %w", root, err)
	}
	in := func(dst string) string { return filepath.Join(root, dst) }
	for _, b := range p.System {
		if err := bindInto(b, in(b.Dst), roAttrs); err != nil {
			return err
		}
	}
	for _, b := range p.Task {
		if err := bindInto(b, in(b.Dst), taskAttrs); err != nil {
			return err
		}
	}
	if err := buildDev(in("/dev")); err != nil {
		return err
	}
	if err := buildProc(in("/proc"), in("/dev/null")); err != nil {
		return err
	}
	if err := p.mask(in); err != nil {
		return err
	}
	for _, h := range p.Hide {
		if err := unix.Mount("tmpfs", in(h), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0"); err != nil {
			return fmt.Errorf("hide %s: %w", h, err)
		}
	}
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir to the root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on the new one; detaching
	// it leaves the new root alone (runc's way, needing no put_old).
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if err := setAttrs("/", unix.MOUNT_ATTR_RDONLY|taskAttrs, false); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return nil
}

// mask covers every masked file with one empty file of mode 0000, bound
// read-only (a task with CAP_DAC_OVERRIDE reads it empty and cannot write
// it). The file is made in the root's tmpfs and unlinked once bound: the
// binds keep it, and the task's / does not show it.
func (p *RootPlan) mask(in func(string) string) error {
	if len(p.Mask) == 0 {
		return nil
	}
	empty := in("/.masked")
	f, err := os.OpenFile(empty, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0)
	if err != nil {
		return fmt.Errorf("make the mask file: %w", err)
	}
	f.Close()
	for _, m := range p.Mask {
		if err := unix.Mount(empty, in(m), "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
		if err := setAttrs(in(m), roAttrs|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return fmt.Errorf("mask %s: %w", m, err)
		}
	}
	if err := os.Remove(empty); err != nil {
		return fmt.Errorf("unlink the mask file: %w", err)
	}
	return nil
}

// bindInto binds b at dst (making the mount point) with attrs, recursively;
// or makes b's symbolic link.
func bindInto(b BindMount, dst string, attrs uint64) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("make %s: %w", filepath.Dir(dst), err)
	}
	if b.Link != "" {
		if err := os.Symlink(b.Link, dst); err != nil {
			return fmt.Errorf("link %s -> %s: %w", b.Dst, b.Link, err)
		}
		return nil
	}
	if err := mountPoint(dst, b.File); err != nil {
		return fmt.Errorf("bind %s at %s: %w", b.Src, b.Dst, err)
	}
	if err := unix.Mount(b.Src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s at %s: %w", b.Src, b.Dst, err)
	}
	if err := setAttrs(dst, attrs, true); err != nil {
		return fmt.Errorf("bind %s at %s: %w", b.Src, b.Dst, err)
	}
	return nil
}

func mountPoint(p string, file bool) error {
	if !file {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("make %s: %w", p, err)
		}
		return nil
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("make %s: %w", p, err)
	}
	return f.Close()
}

// setAttrs sets mount attributes on the mount at p (and every mount below
// it when recursive), through mount_setattr (Linux 5.12), else a remount.
func setAttrs(p string, attrs uint64, recursive bool) error {
	var flags uint = unix.AT_SYMLINK_NOFOLLOW
	if recursive {
		flags |= unix.AT_RECURSIVE
	}
	err := unix.MountSetattr(unix.AT_FDCWD, p, flags, &unix.MountAttr{Attr_set: attrs})
	if !errors.Is(err, unix.ENOSYS) {
		return err
	}
	var mf uintptr = unix.MS_BIND | unix.MS_REMOUNT
	if attrs&unix.MOUNT_ATTR_RDONLY != 0 {
		mf |= unix.MS_RDONLY
	}
	if attrs&unix.MOUNT_ATTR_NOSUID != 0 {
		mf |= unix.MS_NOSUID
	}
	if attrs&unix.MOUNT_ATTR_NODEV != 0 {
		mf |= unix.MS_NODEV
	}
	if attrs&unix.MOUNT_ATTR_NOEXEC != 0 {
		mf |= unix.MS_NOEXEC
	}
	return unix.Mount("", p, "", mf, "")
}

// buildDev makes a minimal /dev: a read-only tmpfs holding bind mounts of
// the host's null, zero, full, random, urandom and tty, a devpts instance of
// its own, a tmpfs /dev/shm, and the usual links. The tmpfs is nodev, so a
// device node made anywhere by the task (CAP_MKNOD) opens nothing.
func buildDev(dev string) error {
	if err := os.MkdirAll(dev, 0o755); err != nil {
		return fmt.Errorf("make /dev: %w", err)
	}
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	for _, d := range devices {
		p := filepath.Join(dev, d)
		if err := mountPoint(p, true); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
		if err := setAttrs(p, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	if err := os.Mkdir(pts, 0o755); err != nil {
		return fmt.Errorf("make /dev/pts: %w", err)
	}
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	shm := filepath.Join(dev, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		return fmt.Errorf("make /dev/shm: %w", err)
	}
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size=65536k"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, filepath.Join(dev, name)); err != nil {
			return fmt.Errorf("link /dev/%s: %w", name, err)
		}
	}
	if err := setAttrs(dev, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}

// buildProc mounts a proc of the task's PID namespace and shields the
// host's kernel interfaces in it.
func buildProc(proc, devNull string) error {
	if err := os.Mkdir(proc, 0o555); err != nil {
		return fmt.Errorf("make /proc: %w", err)
	}
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, n := range procReadOnly {
		p := filepath.Join(proc, n)
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind /proc/%s: %w", n, err)
		}
		if err := setAttrs(p, roAttrs|unix.MOUNT_ATTR_NOEXEC, true); err != nil {
			return fmt.Errorf("make /proc/%s read-only: %w", n, err)
		}
	}
	for _, n := range procMasked {
		p := filepath.Join(proc, n)
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.IsDir() {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
		} else {
			err = unix.Mount(devNull, p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /proc/%s: %w", n, err)
		}
	}
	return nil
}
