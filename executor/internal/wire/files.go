//go:build linux

package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/statedir"
)

// maxSideFile bounds what is read of a side file: they are small JSON
// records, and a task (which may run with its task directory as its
// working directory, and as the executor's user) could plant a huge one.
const maxSideFile = 64 << 10

// ExitRecord is the on-disk form of statedir.ExitStatusFile: the task's exit status
// and whose it is (the spawn nonce, the boot it happened in, and the task
// process it is the status of), so that a driver checks it against the log
// before believing it.
type ExitRecord struct {
	Exit      fsm.ExitStatus `json:"exit"`
	Nonce     string         `json:"nonce"`
	BootID    string         `json:"boot_id"`
	PID       int            `json:"pid"`
	StartTime uint64         `json:"start_time"`
}

// LaunchRecord is the on-disk form of statedir.LaunchFile: the task process the
// executor launched, and whose launch it was.
type LaunchRecord struct {
	Nonce     string `json:"nonce"`
	BootID    string `json:"boot_id"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// owner is whose a side file says it is: the spawn nonce and boot id of
// the executor that wrote it, and the task process it is about.
type owner struct {
	nonce, boot string
	run         fsm.Proc
}

// match checks a side file's owner against what the log says: the spawn
// nonce and boot id of the task's executor, and (when the log has it, run
// not zero) the task process. A mismatch is ErrSideFileMismatch: the file
// is not ours to believe, and nothing may be signalled or recorded from
// it.
func (o owner) match(name string, want fsm.Identity, run fsm.Proc) error {
	switch {
	case o.nonce != want.Nonce:
		return fmt.Errorf("%w: %s names nonce %q, the log's executor has %q", ErrSideFileMismatch, name, o.nonce, want.Nonce)
	case want.BootID != "" && o.boot != want.BootID:
		return fmt.Errorf("%w: %s is from boot %q, the log's executor ran in %q", ErrSideFileMismatch, name, o.boot, want.BootID)
	case o.run.PID <= 0:
		return fmt.Errorf("%w: %s names no task pid", ErrSideFileMismatch, name)
	case !run.IsZero() && o.run != run:
		return fmt.Errorf("%w: %s names %s, the log's task is %s", ErrSideFileMismatch, name, o.run, run)
	}
	return nil
}

// Match checks the record against the log's executor identity and, when
// run is not zero, the log's task process (see ErrSideFileMismatch).
func (r ExitRecord) Match(want fsm.Identity, run fsm.Proc) error {
	return owner{r.Nonce, r.BootID, r.Proc()}.match(statedir.ExitStatusFile, want, run)
}

// Proc is the task process the record is the exit status of.
func (r ExitRecord) Proc() fsm.Proc { return fsm.Proc{PID: r.PID, StartTime: r.StartTime} }

// Match checks the record against the log's executor identity.
func (r LaunchRecord) Match(want fsm.Identity) error {
	return owner{r.Nonce, r.BootID, r.Proc()}.match(statedir.LaunchFile, want, fsm.Proc{})
}

// Proc is the task process the executor launched.
func (r LaunchRecord) Proc() fsm.Proc { return fsm.Proc{PID: r.PID, StartTime: r.StartTime} }

// SocketPath is the control socket of the executor of taskDir.
func SocketPath(taskDir string) string { return filepath.Join(taskDir, statedir.SocketFile) }

// readSideFile reads dir/name into v: never through a symlink (O_NOFOLLOW),
// only a regular file, at most maxSideFile bytes. ok is false when the file
// does not exist.
func readSideFile(dir, name string, v any) (ok bool, err error) {
	path := filepath.Join(dir, name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if errors.Is(err, unix.ELOOP) {
		return false, fmt.Errorf("%w: %s is a symbolic link; not followed", ErrSideFileMismatch, path)
	}
	if err != nil {
		return false, fmt.Errorf("executor: read %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return false, fmt.Errorf("executor: read %s: %w", path, err)
	} else if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%w: %s is not a regular file", ErrSideFileMismatch, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSideFile+1))
	if err != nil {
		return false, fmt.Errorf("executor: read %s: %w", path, err)
	}
	if len(b) > maxSideFile {
		return false, fmt.Errorf("%w: %s is larger than %d bytes", ErrSideFileMismatch, path, maxSideFile)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("%w: %s: %w", ErrProtocol, path, err)
	}
	return true, nil
}

// ReadIdentity reads the identity file an executor left in taskDir. A missing
// file yields an error matching fs.ErrNotExist.
func ReadIdentity(taskDir string) (fsm.Identity, error) {
	var id fsm.Identity
	ok, err := readSideFile(taskDir, statedir.IdentityFile, &id)
	if err == nil && !ok {
		err = fmt.Errorf("executor: read identity in %s: %w", taskDir, fs.ErrNotExist)
	}
	return id, err
}

// ReadExitRecord returns the exit record the executor left in taskDir; ok
// is false when there is none (the task has not exited, or the executor
// died without recording it). Check it with Match before believing it.
func ReadExitRecord(taskDir string) (ExitRecord, bool, error) {
	var r ExitRecord
	ok, err := readSideFile(taskDir, statedir.ExitStatusFile, &r)
	return r, ok, err
}

// ReadLaunchRecord returns the launch record the executor of taskDir wrote
// when it launched its task, if it did. A driver that crashed between the
// launch intent and recording the launch uses it (after Match) to find the
// task when the executor itself is gone.
func ReadLaunchRecord(taskDir string) (LaunchRecord, bool, error) {
	var r LaunchRecord
	ok, err := readSideFile(taskDir, statedir.LaunchFile, &r)
	return r, ok && r.PID > 0, err
}

// writeFileAtomic writes v as JSON to dir/name: a temporary file, fsync,
// rename over name, fsync of the directory.
func WriteFileAtomic(dir, name string, v any) error {
	return WriteFile(dir, name, v, true)
}

// writeFile writes v as JSON to dir/name through a rename, so readers see
// all of it or nothing; with durable, it also fsyncs the file and the
// directory. A record that only matters while this boot lasts (the launch
// record: a reboot kills the task with it) needs no fsync.
func WriteFile(dir, name string, v any, durable bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("executor: encode %s: %w", name, err)
	}
	tmp := filepath.Join(dir, statedir.TempName(name))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("executor: write %s: %w", name, err)
	}
	_, err = f.Write(b)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("executor: write %s: %w", name, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("executor: sync dir for %s: %w", name, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("executor: sync dir for %s: %w", name, err)
	}
	return nil
}

// shortPath turns a path of any length into one that fits a sockaddr_un:
// /proc/self/fd/N/<base>, with N an O_PATH descriptor of the directory. The
// caller closes the returned descriptor after bind or connect (a listener
// keeps it open for as long as it may unlink the socket).
func ShortPath(path string) (string, int, error) {
	dfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("executor: open socket dir: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + filepath.Base(path), dfd, nil
}

// dialSocket connects to the unix socket at path, whatever its length.
func DialSocket(path string) (*net.UnixConn, error) {
	sp, dfd, err := ShortPath(path)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("executor: connect %s: %w", path, err)
	}
	return c, nil
}
func ValidNonce(n string) bool {
	if len(n) < 8 || len(n) > 128 {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
