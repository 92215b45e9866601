package logs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// stream names the files of one stream in a directory:
//
//	stdout.log          the live file, always under this name
//	stdout.log.N        rotated files; N grows by one at each rotation
//	.stdout.log.live    a symlink whose text is "N:INODE": the index the
//	                    live file will get when it is rotated, and the
//	                    inode of the live file it was written for
//	.stdout.log.new     the next live file, while a rotation prepares it
//
// The marker lags the live file by at most one rotation: the writer
// updates it right after a rotation and rotates again only once it is
// current. So a reader that opened the live file knows its index: the
// marker's N if the marker names its inode, else N+1.
type stream struct {
	dir, name string
}

func newStream(dir, name string) (stream, error) {
	if err := validName(name); err != nil {
		return stream{}, err
	}
	return stream{dir: dir, name: name}, nil
}

func validName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("%w: %q: give a file name such as stdout.log", ErrBadName, name)
	case strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: %q: a stream name is a file name in the directory, without '/'", ErrBadName, name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%w: %q: a stream name must not start with '.' (those names hold the rotation's bookkeeping)", ErrBadName, name)
	}
	return nil
}

func (s stream) live() string                { return filepath.Join(s.dir, s.name) }
func (s stream) rotatedName(i uint64) string { return s.name + "." + strconv.FormatUint(i, 10) }
func (s stream) rotated(i uint64) string     { return filepath.Join(s.dir, s.rotatedName(i)) }
func (s stream) next() string                { return filepath.Join(s.dir, "."+s.name+".new") }
func (s stream) marker() string              { return filepath.Join(s.dir, "."+s.name+".live") }
func (s stream) markerNew() string           { return filepath.Join(s.dir, "."+s.name+".live.new") }

// index parses a directory entry's name as a rotated file of s.
func (s stream) index(entry string) (uint64, bool) {
	digits, ok := strings.CutPrefix(entry, s.name+".")
	if !ok || digits == "" || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	i, err := strconv.ParseUint(digits, 10, 64)
	return i, err == nil
}

// listRotated returns the indexes of the rotated files on disk, ascending.
func (s stream) listRotated() ([]uint64, error) {
	d, err := os.Open(s.dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	var idx []uint64
	for _, n := range names {
		if i, ok := s.index(n); ok {
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx, nil
}

// mark is the content of the marker: the live file's index and inode.
type mark struct {
	index, ino uint64
}

func (m mark) String() string { return fmt.Sprintf("%d:%d", m.index, m.ino) }

// readMarker reads the marker; ok is false when it is missing or not one
// the writer wrote.
func (s stream) readMarker() (m mark, ok bool) {
	text, err := os.Readlink(s.marker())
	if err != nil {
		return mark{}, false
	}
	a, b, found := strings.Cut(text, ":")
	if !found {
		return mark{}, false
	}
	var errA, errB error
	m.index, errA = strconv.ParseUint(a, 10, 64)
	m.ino, errB = strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil || m.index == 0 {
		return mark{}, false
	}
	return m, true
}

// writeMarker replaces the marker atomically. A symlink's short text lives
// in its inode on ext4, xfs and tmpfs, so this works on a full disk too.
func (s stream) writeMarker(m mark, o owner) error {
	tmp := s.markerNew()
	_ = os.Remove(tmp)
	if err := os.Symlink(m.String(), tmp); err != nil {
		return err
	}
	if o.set {
		if err := os.Lchown(tmp, o.uid, o.gid); err != nil {
			_ = os.Remove(tmp)
			return err
		}
	}
	if err := os.Rename(tmp, s.marker()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// owner is the uid and gid the writer gives the files it creates.
type owner struct {
	set      bool
	uid, gid int
}

// statOf returns the system stat of fi.
func statOf(fi fs.FileInfo) *syscall.Stat_t {
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return &syscall.Stat_t{}
	}
	return st
}

func inoOf(fi fs.FileInfo) uint64 { return statOf(fi).Ino }

func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
