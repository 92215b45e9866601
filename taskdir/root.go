package taskdir

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// beneath is how every path below a Root is resolved: never above the
// root, never through a symbolic link (nor magic /proc links).
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// Root is a directory opened once; every operation resolves its path
// below it with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS.
type Root struct {
	fd   int
	path string
}

// Owner is who a written file or created directory belongs to; -1 keeps
// the caller's.
type Owner struct{ UID, GID int }

// Keep is the caller's own user and group.
var Keep = Owner{UID: -1, GID: -1}

// OpenRoot opens dir, which must be a directory (its own path is trusted:
// it is the caller's).
func OpenRoot(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("taskdir: open %s: %w", dir, err)
	}
	return &Root{fd: fd, path: dir}, nil
}

// Close releases the root.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Path is the root's host path.
func (r *Root) Path() string { return r.path }

func (r *Root) errf(op, rel string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%w: %s %s: a symbolic link is in the way (%w)", ErrSymlink, op, filepath.Join(r.path, rel), err)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %s %s (%w)", ErrOutside, op, filepath.Join(r.path, rel), err)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%w: %s %s (%w)", ErrNotDir, op, filepath.Join(r.path, rel), err)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w: %s %s", ErrUnsupported, op, filepath.Join(r.path, rel))
	}
	return fmt.Errorf("taskdir: %s %s: %w", op, filepath.Join(r.path, rel), err)
}

// clean checks that rel is a relative path that stays below the root.
func clean(rel string) (string, error) {
	if rel == "" || filepath.IsAbs(rel) || strings.IndexByte(rel, 0) >= 0 {
		return "", fmt.Errorf("%w: %q is not a relative path", ErrOutside, rel)
	}
	c := filepath.Clean(rel)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q leaves its directory", ErrOutside, rel)
	}
	return c, nil
}

func (r *Root) openat2(dirfd int, rel string, flags uint64, mode uint64) (int, error) {
	for {
		fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: beneath})
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// dir opens the directory rel (creating it and its parents with perm and
// owner when create is set) and returns its descriptor.
func (r *Root) dir(rel string, create bool, perm os.FileMode, owner Owner) (int, error) {
	c, err := clean(rel)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Dup(r.fd)
	if err != nil {
		return -1, r.errf("open", ".", err)
	}
	if c == "." {
		return fd, nil
	}
	for _, name := range strings.Split(c, "/") {
		if create {
			switch err := unix.Mkdirat(fd, name, uint32(perm.Perm())); {
			case err == nil:
				if err := r.made(fd, name, perm, owner); err != nil {
					unix.Close(fd)
					return -1, r.errf("set the mode and owner of", c, err)
				}
			case errors.Is(err, unix.EEXIST):
			default:
				unix.Close(fd)
				return -1, r.errf("mkdir", c, err)
			}
		}
		next, err := r.openat2(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
		if errors.Is(err, unix.ENOTDIR) {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP // a link where a directory must be: never followed
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, r.errf("open directory", c, err)
		}
		fd = next
	}
	return fd, nil
}

// made gives the directory name, just made in dirfd, the mode perm (the
// umask took bits away: the executor's is 077, and a 0700 directory is one
// a task run as another user cannot enter) and owner: through a
// descriptor opened beneath dirfd without following a link, so that a
// link put in its place meanwhile is an error, never followed.
func (r *Root) made(dirfd int, name string, perm os.FileMode, owner Owner) error {
	fd, err := r.openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		return err
	}
	if owner != Keep {
		return unix.Fchown(fd, owner.UID, owner.GID)
	}
	return nil
}

// MkdirAll makes the directory rel and its missing parents, with perm and
// owner for those it creates.
func (r *Root) MkdirAll(rel string, perm os.FileMode, owner Owner) error {
	fd, err := r.dir(rel, true, perm, owner)
	if err != nil {
		return err
	}
	return unix.Close(fd)
}

// split returns rel's parent directory and base name.
func split(rel string) (string, string, error) {
	c, err := clean(rel)
	if err != nil {
		return "", "", err
	}
	if c == "." {
		return "", "", fmt.Errorf("%w: %q names the directory itself, not a file in it", ErrNotDir, rel)
	}
	return filepath.Dir(c), filepath.Base(c), nil
}

// WriteFile writes data to rel atomically (a temporary file in the same
// directory, fsynced, renamed over rel), with perm and owner, creating
// missing parent directories (0755). A symbolic link anywhere on the way
// is refused; one at rel itself is replaced, never followed.
func (r *Root) WriteFile(rel string, data []byte, perm os.FileMode, owner Owner) error {
	_, err := r.WriteFrom(rel, bytes.NewReader(data), -1, perm, owner)
	return err
}

// WriteFrom is WriteFile with the content read from src, at most limit
// bytes (a negative limit: no limit); it returns the bytes written.
func (r *Root) WriteFrom(rel string, src io.Reader, limit int64, perm os.FileMode, owner Owner) (int64, error) {
	parent, base, err := split(rel)
	if err != nil {
		return 0, err
	}
	dfd, err := r.dir(parent, true, 0o755, owner)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dfd)
	if fi, err := r.lstatAt(dfd, base); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("%w: %s is a directory", ErrNotDir, filepath.Join(r.path, rel))
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + base + ".tether-" + hex.EncodeToString(rnd[:])
	if len(tmp) > 255 {
		tmp = ".tether-" + hex.EncodeToString(rnd[:])
	}
	fd, err := r.openat2(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, uint64(perm.Perm()))
	if err != nil {
		return 0, r.errf("create", rel, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(r.path, parent, tmp))
	ok := false
	defer func() {
		if !ok {
			f.Close()
			_ = unix.Unlinkat(dfd, tmp, 0)
		}
	}()
	rd := src
	if limit >= 0 {
		rd = io.LimitReader(src, limit+1)
	}
	n, err := io.Copy(f, rd)
	if err != nil {
		return n, r.errf("write", rel, err)
	}
	if limit >= 0 && n > limit {
		return n, fmt.Errorf("taskdir: %s: more than %d bytes", filepath.Join(r.path, rel), limit)
	}
	if err := f.Chmod(perm.Perm()); err != nil { // the umask took bits away
		return n, r.errf("chmod", rel, err)
	}
	if owner != Keep {
		if err := f.Chown(owner.UID, owner.GID); err != nil {
			return n, r.errf("chown", rel, err)
		}
	}
	if err := f.Sync(); err != nil {
		return n, r.errf("sync", rel, err)
	}
	if err := unix.Renameat(dfd, tmp, dfd, base); err != nil {
		return n, r.errf("rename", rel, err)
	}
	ok = true
	f.Close()
	// dfd is an O_PATH descriptor, which fsync refuses: sync the directory
	// through a readable one.
	sfd, err := r.openat2(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return n, r.errf("sync directory of", rel, err)
	}
	defer unix.Close(sfd)
	if err := unix.Fsync(sfd); err != nil {
		return n, r.errf("sync directory of", rel, err)
	}
	return n, nil
}

// ReadDir lists the directory rel (no symbolic link followed on the way).
func (r *Root) ReadDir(rel string) ([]fs.DirEntry, error) {
	fd, err := r.dir(rel, false, 0, Keep)
	if err != nil {
		return nil, err
	}
	rfd, err := r.openat2(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
	unix.Close(fd)
	if err != nil {
		return nil, r.errf("open directory", rel, err)
	}
	f := os.NewFile(uintptr(rfd), filepath.Join(r.path, rel))
	defer f.Close()
	return f.ReadDir(-1)
}

// Create opens rel for writing, truncating it (a regular file only: a
// symbolic link there is refused), creating missing parents (0755).
func (r *Root) Create(rel string, perm os.FileMode) (*os.File, error) {
	parent, base, err := split(rel)
	if err != nil {
		return nil, err
	}
	dfd, err := r.dir(parent, true, 0o755, Keep)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	fd, err := r.openat2(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, uint64(perm.Perm()))
	if err != nil {
		return nil, r.errf("create", rel, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.path, rel)), nil
}

// Open opens the regular file rel for reading; no symbolic link is
// followed on the way. Anything else (a fifo a task planted would block
// the reader for ever, a device, a directory) is ErrNotRegular, found
// without blocking.
func (r *Root) Open(rel string) (*os.File, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fd, err := r.openat2(r.fd, c, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, r.errf("open", rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, r.errf("stat", rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%w: %s", ErrNotRegular, filepath.Join(r.path, c))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, r.errf("open", rel, err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(r.path, c)), nil
}

// OpenAs is Open for a reader acting for the user uid (a preparer running
// as root for a task): a file with more than one link that uid does not
// own is refused (see ReadFileAs). uid < 0 is Open.
func (r *Root) OpenAs(rel string, uid int) (*os.File, error) {
	f, err := r.Open(rel)
	if err != nil || uid < 0 {
		return f, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, r.errf("stat", rel, err)
	}
	if st.Nlink > 1 && int(st.Uid) != uid {
		f.Close()
		return nil, fmt.Errorf("%w: %s has %d hard links and belongs to uid %d, not %d: not read for it", ErrOutside, f.Name(), st.Nlink, st.Uid, uid)
	}
	return f, nil
}

// ReadFile reads rel whole, at most limit bytes (0: no limit).
func (r *Root) ReadFile(rel string, limit int64) ([]byte, error) {
	f, err := r.Open(rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return r.read(f, rel, limit)
}

func (r *Root) read(f *os.File, rel string, limit int64) ([]byte, error) {
	var rd io.Reader = f
	if limit > 0 {
		rd = io.LimitReader(f, limit+1)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		return nil, r.errf("read", rel, err)
	}
	if limit > 0 && int64(len(b)) > limit {
		return nil, fmt.Errorf("taskdir: %s is larger than %d bytes", filepath.Join(r.path, rel), limit)
	}
	return b, nil
}

// ReadFileAs is ReadFile for a reader acting for the user uid (a
// renderer running as root for a task): a file with more than one link
// that uid does not own is refused, since a task may hard-link a file it
// cannot read into its own directory (where fs.protected_hardlinks is
// off) to have root read it. uid < 0 is ReadFile.
func (r *Root) ReadFileAs(rel string, limit int64, uid int) ([]byte, error) {
	f, err := r.OpenAs(rel, uid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return r.read(f, rel, limit)
}

// Lstat describes rel without following a final symbolic link.
func (r *Root) Lstat(rel string) (fs.FileInfo, error) {
	if c, err := clean(rel); err == nil && c == "." {
		return os.Stat(r.path)
	}
	parent, base, err := split(rel)
	if err != nil {
		return nil, err
	}
	dfd, err := r.dir(parent, false, 0, Keep)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	return r.lstatAt(dfd, base)
}

func (r *Root) lstatAt(dfd int, base string) (fs.FileInfo, error) {
	fd, err := r.openat2(dfd, base, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	return f.Stat()
}

// Symlink makes rel a symbolic link to target. target must be relative
// and stay below the root seen from rel's directory: a link out is
// refused, not created.
func (r *Root) Symlink(target, rel string) error {
	parent, base, err := split(rel)
	if err != nil {
		return err
	}
	if filepath.IsAbs(target) || target == "" || strings.IndexByte(target, 0) >= 0 {
		return fmt.Errorf("%w: symbolic link %s -> %q points outside", ErrOutside, rel, target)
	}
	if _, err := clean(filepath.Join(parent, target)); err != nil {
		return fmt.Errorf("%w: symbolic link %s -> %q points outside", ErrOutside, rel, target)
	}
	dfd, err := r.dir(parent, true, 0o755, Keep)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	_ = unix.Unlinkat(dfd, base, 0) // an archive may replace what it wrote
	if err := unix.Symlinkat(target, dfd, base); err != nil {
		return r.errf("symlink", rel, err)
	}
	return nil
}

// Link makes rel a hard link to the regular file old (both below the
// root; old is not followed if it is a link).
func (r *Root) Link(old, rel string) error {
	op, ob, err := split(old)
	if err != nil {
		return err
	}
	np, nb, err := split(rel)
	if err != nil {
		return err
	}
	ofd, err := r.dir(op, false, 0, Keep)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	fi, err := r.lstatAt(ofd, ob)
	if err != nil {
		return r.errf("link", old, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: hard link %s -> %s: the target is not a regular file", ErrOutside, rel, old)
	}
	nfd, err := r.dir(np, true, 0o755, Keep)
	if err != nil {
		return err
	}
	defer unix.Close(nfd)
	_ = unix.Unlinkat(nfd, nb, 0)
	if err := unix.Linkat(ofd, ob, nfd, nb, 0); err != nil {
		return r.errf("link", rel, err)
	}
	return nil
}

// Chown sets rel's owner without following a symbolic link.
func (r *Root) Chown(rel string, owner Owner) error {
	if owner == Keep {
		return nil
	}
	c, err := clean(rel)
	if err != nil {
		return err
	}
	fd, err := r.openat2(r.fd, c, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return r.errf("chown", rel, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", owner.UID, owner.GID, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return r.errf("chown", rel, err)
	}
	return nil
}

// OpenDir opens the directory rel below the root as a path descriptor
// (O_PATH), no symbolic link followed on the way or at its end: for a
// privileged process to fchdir into a task's directory, or to act below
// it, without a link the task planted ever taking it elsewhere.
func (r *Root) OpenDir(rel string) (*os.File, error) {
	fd, err := r.dir(rel, false, 0, Keep)
	if err != nil {
		return nil, err
	}
	c, _ := clean(rel)
	return os.NewFile(uintptr(fd), filepath.Join(r.path, c)), nil
}

// EnsureDir makes rel a directory with perm and owner: created when
// missing (its parents must exist), and its mode and owner set through a
// descriptor of it, so that a symbolic link or anything but a directory
// there is an error and never followed.
func (r *Root) EnsureDir(rel string, perm os.FileMode, owner Owner) error {
	parent, base, err := split(rel)
	if err != nil {
		return err
	}
	dfd, err := r.dir(parent, false, 0, Keep)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Mkdirat(dfd, base, uint32(perm.Perm())); err != nil && !errors.Is(err, unix.EEXIST) {
		return r.errf("mkdir", rel, err)
	}
	fd, err := r.openat2(dfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			if fi, lerr := r.lstatAt(dfd, base); lerr == nil && fi.Mode()&os.ModeSymlink != 0 {
				err = unix.ELOOP
			}
		}
		return r.errf("open directory", rel, err)
	}
	defer unix.Close(fd)
	mode := uint32(perm.Perm())
	if perm&os.ModeSticky != 0 {
		mode |= unix.S_ISVTX
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return r.errf("chmod", rel, err)
	}
	if owner != Keep {
		if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
			return r.errf("chown", rel, err)
		}
	}
	return nil
}
