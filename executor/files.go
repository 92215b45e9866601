//go:build linux

package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Files the executor keeps in its task directory.
const (
	IdentityFile   = "executor.json" // the executor's Identity, written before it answers
	ExitStatusFile = "exit.json"     // the task's exit status, written before the executor exits
	LogFile        = "executor.log"  // the executor's own log (its stderr)
	StdoutFile     = "stdout.log"    // the task's stdout
	StderrFile     = "stderr.log"    // the task's stderr
	SocketFile     = "executor.sock" // the control socket (0600, in the 0700 task directory)
	LaunchFile     = "launch.json"   // the task's pid and start time, written before Launch answers
)

// Identity proves an executor process is ours.
type Identity struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"` // /proc/PID/stat field 22, clock ticks since boot
	BootID    string `json:"boot_id"`    // /proc/sys/kernel/random/boot_id
	Nonce     string `json:"nonce"`
	Socket    string `json:"socket"`
}

// ExitStatus is how the task ended. Signal > 0 means it was killed by that
// signal, and Code is then -1.
type ExitStatus struct {
	Code   int `json:"code"`
	Signal int `json:"signal"`
}

// exitRecord is the on-disk form of ExitStatusFile: the status plus whose it is.
type exitRecord struct {
	ExitStatus
	Nonce    string `json:"nonce"`
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
}

func socketPath(taskDir string) string { return filepath.Join(taskDir, SocketFile) }

// ReadIdentity reads the identity file an executor left in taskDir. A missing
// file yields an error matching fs.ErrNotExist.
func ReadIdentity(taskDir string) (Identity, error) {
	var id Identity
	b, err := os.ReadFile(filepath.Join(taskDir, IdentityFile))
	if err != nil {
		return id, fmt.Errorf("executor: read identity: %w", err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return id, fmt.Errorf("%w: identity file: %w", ErrProtocol, err)
	}
	return id, nil
}

// ReadExitStatus returns the task's exit status the executor left in
// taskDir; ok is false when there is none (the task has not exited, or the
// executor died without recording it).
func ReadExitStatus(taskDir string) (ExitStatus, bool, error) {
	r, ok, err := readExitRecord(taskDir)
	return r.ExitStatus, ok, err
}

func readExitRecord(taskDir string) (exitRecord, bool, error) {
	var r exitRecord
	b, err := os.ReadFile(filepath.Join(taskDir, ExitStatusFile))
	if errors.Is(err, fs.ErrNotExist) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("executor: read exit status: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, false, fmt.Errorf("%w: exit status file: %w", ErrProtocol, err)
	}
	return r, true, nil
}

// launchRecord is the on-disk form of LaunchFile.
type launchRecord struct {
	Nonce    string `json:"nonce"`
	PID      int    `json:"pid"`
	PIDStart uint64 `json:"pid_start"`
}

// ReadLaunchRecord returns the pid and start time of the task the executor
// of taskDir launched, if it launched one. A driver that crashed between the
// launch intent and recording the launch uses it to kill the task's group
// when the executor itself is gone.
func ReadLaunchRecord(taskDir string) (pid int, start uint64, ok bool, err error) {
	var r launchRecord
	b, err := os.ReadFile(filepath.Join(taskDir, LaunchFile))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("executor: read launch record: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return 0, 0, false, fmt.Errorf("%w: launch record: %w", ErrProtocol, err)
	}
	return r.PID, r.PIDStart, r.PID > 0, nil
}

// writeFileAtomic writes v as JSON to dir/name: a temporary file, fsync,
// rename over name, fsync of the directory.
func writeFileAtomic(dir, name string, v any) error {
	return writeFile(dir, name, v, true)
}

// writeFile writes v as JSON to dir/name through a rename, so readers see
// all of it or nothing; with durable, it also fsyncs the file and the
// directory. A record that only matters while this boot lasts (the launch
// record: a reboot kills the task with it) needs no fsync.
func writeFile(dir, name string, v any, durable bool) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("executor: encode %s: %w", name, err)
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
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
func shortPath(path string) (string, int, error) {
	dfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("executor: open socket dir: %w", err)
	}
	return "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + filepath.Base(path), dfd, nil
}

// dialSocket connects to the unix socket at path, whatever its length.
func dialSocket(path string) (*net.UnixConn, error) {
	sp, dfd, err := shortPath(path)
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
