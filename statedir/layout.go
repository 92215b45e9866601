package statedir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// A state directory:
//
//	DIR/
//	  tether.db          the store (package store; its lock is tether.db.lock)
//	  recover.lock       held (flock) by a tether recover while it runs; names its pid
//	  tasks/
//	    ID/              one per task, 0700
//	      driver.lock    held (flock) by the process driving the task
//	      executor.json  the executor's identity, written before it answers
//	      executor.sock  its control socket, 0600
//	      executor.log   its own log (its stderr)
//	      launch.json    the task process it launched, before it answered
//	      exit.json      the task's exit status, before the executor exits
//	      restart.journal  the restarts it performed, each written ahead
//	      stdout.log, stderr.log (and their rotations .1, .2, ...)
//	      local/ secrets/ tmp/ alloc/   a lone task's own directories
//	      root/          the empty mount point of an exec task's root
//	  names/             0700, made by the first start of a named task
//	    HASH.lock        held (flock) while a start or restart of the name
//	                     checks that no task of it is live and starts one
//	  allocs/
//	    ALLOC/           one copy of a group (Nomad's allocation), 0711
//	      group.lock     held (flock) by the process driving the group
//	      group.log      the log of a started group's detached driver
//	      alloc/         the group's shared directory: data/ logs/ tmp/
//	      NAME/          a task's directory: local/ secrets/ tmp/
//
// A task of a task or job file has Nomad's layout, below allocs/: its
// directory and its group's alloc directory are siblings (a raw_exec task
// reaches ../alloc), apart from the executor's files in tasks/ID. A lone
// task (tether run -- CMD) keeps its directories in tasks/ID.
//
// Every name of it is spelled in this file, and nowhere else.

// Names of the state directory's entries.
const (
	StoreFile       = "tether.db"
	TasksDir        = "tasks"
	NamesDir        = "names"
	AllocsDir       = "allocs"
	RecoverLockFile = "recover.lock" // held (flock) by a recovery of the whole state directory
)

// Names in an allocation's directory.
const (
	GroupLockFile = "group.lock" // held (flock) by the process driving the group
	GroupLogFile  = "group.log"  // the log of the detached process driving a started group
	SharedDir     = "alloc"      // the group's shared alloc directory
)

// Names of the files in a task's directory.
const (
	LockFile       = "driver.lock"     // held (flock) by the process driving the task
	IdentityFile   = "executor.json"   // the executor's fsm.Identity, written before it answers
	SocketFile     = "executor.sock"   // the executor's control socket (0600)
	LogFile        = "executor.log"    // the executor's own log (its stderr)
	LaunchFile     = "launch.json"     // the task process, written before the launch is answered
	ExitStatusFile = "exit.json"       // the task's exit status, written before the executor exits
	JournalFile    = "restart.journal" // the restarts the executor performed, each written ahead
	StdoutFile     = "stdout.log"      // the task's stdout (rotated: stdout.log.1, ...)
	StderrFile     = "stderr.log"      // the task's stderr
	ReserveFile    = ".exit.reserve"   // room held for the exit status on a full disk
)

// The task's own directories, below its task directory. An exec task sees
// them at /local, /secrets, /tmp and /alloc in its root, built on RootDir.
const (
	LocalDir   = "local"   // its working directory by default, and HOME for exec
	SecretsDir = "secrets" // 0700
	TmpDir     = "tmp"
	AllocDir   = "alloc" // NOMAD_ALLOC_DIR
	RootDir    = "root"  // the empty mount point an exec task's root is built on
)

// TempName is the temporary name a side file is written under before it
// is renamed over name, so that readers see all of it or nothing.
func TempName(name string) string { return "." + name + ".tmp" }

// Layout is one state directory: every path of it.
type Layout struct{ Dir string }

// Store is the store's file.
func (l Layout) Store() string { return filepath.Join(l.Dir, StoreFile) }

// RecoverLock is the lock a recovery of every live task holds, so that a
// second one says what the first is doing and waits for it.
func (l Layout) RecoverLock() string { return filepath.Join(l.Dir, RecoverLockFile) }

// Tasks is the directory of the tasks' directories.
func (l Layout) Tasks() string { return filepath.Join(l.Dir, TasksDir) }

// Names is the directory of the task names' lock files.
func (l Layout) Names() string { return filepath.Join(l.Dir, NamesDir) }

// NameLock is the lock file of a task name: one file a name, named by
// the first 16 bytes of the name's SHA-256 in hex, so that any name (a
// slash, "..", a kilobyte of it) is one entry of Names.
func (l Layout) NameLock(name string) string {
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(l.Names(), hex.EncodeToString(sum[:16])+".lock")
}

// Task is the private directory of task id. The id must be valid
// (ValidateTaskID): one that is not could name a path outside Tasks.
func (l Layout) Task(id string) Task { return Task(filepath.Join(l.Dir, TasksDir, id)) }

// Allocs is the directory of the allocations' directories.
func (l Layout) Allocs() string { return filepath.Join(l.Dir, AllocsDir) }

// Alloc is the directory of allocation id. The id must be valid
// (ValidateTaskID's rules): one that is not could name a path outside
// Allocs.
func (l Layout) Alloc(id string) Alloc { return Alloc(filepath.Join(l.Dir, AllocsDir, id)) }

// Alloc is one allocation's directory (a copy of a group).
type Alloc string

// Dir is the directory itself.
func (a Alloc) Dir() string { return string(a) }

// ID is the allocation's id: the directory's name.
func (a Alloc) ID() string { return filepath.Base(string(a)) }

// Shared is the group's shared alloc directory (NOMAD_ALLOC_DIR).
func (a Alloc) Shared() string { return filepath.Join(string(a), SharedDir) }

// Task is the directory of the task named dir (a name ValidateTaskDirName
// accepts).
func (a Alloc) Task(dir string) string { return filepath.Join(string(a), dir) }

// Lock is the group's lock file.
func (a Alloc) Lock() string { return filepath.Join(string(a), GroupLockFile) }

// Log is the log of the detached process that drives a started group.
func (a Alloc) Log() string { return filepath.Join(string(a), GroupLogFile) }

// ValidateTaskDirName checks that name can be a task's directory in an
// allocation: a task id's characters, and not a name the allocation's
// directory uses itself.
func ValidateTaskDirName(name string) error {
	if err := ValidateTaskID(name); err != nil {
		return err
	}
	if name == SharedDir || name == GroupLockFile || name == GroupLogFile {
		return fmt.Errorf("%w %q: the allocation's directory uses that name", ErrInvalidTaskID, name)
	}
	return nil
}

// Task is one task's private directory; its methods are its files.
type Task string

// Dir is the directory itself.
func (t Task) Dir() string { return string(t) }

// ID is the task's id: the directory's name.
func (t Task) ID() string { return filepath.Base(string(t)) }

// File is the entry name (one of the names above) of the directory.
func (t Task) File(name string) string { return filepath.Join(string(t), name) }

// Lock is the task's lock file.
func (t Task) Lock() string { return t.File(LockFile) }

// Socket is the executor's control socket.
func (t Task) Socket() string { return t.File(SocketFile) }

// Log is the executor's own log.
func (t Task) Log() string { return t.File(LogFile) }

// Prepare makes sure the layout's directory can serve as a state
// directory: a missing one is created 0700 (with tasks/ inside); an
// existing one must be a directory (not a symbolic link) owned by the
// caller with no group or other permissions, and is never chmodded: a
// shared directory is refused with an error (ErrStateDir) saying what to
// do.
func (l Layout) Prepare() error {
	dir := l.Dir
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return fmt.Errorf("statedir: create state directory %s: %w", dir, err)
		}
		if err := MkdirDurable(dir); err != nil {
			return fmt.Errorf("statedir: create state directory %s: %w", dir, err)
		}
		if fi, err = os.Lstat(dir); err != nil {
			return fmt.Errorf("statedir: state directory %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("statedir: state directory %s: %w", dir, err)
	}
	if err := checkPrivateDir(dir, fi); err != nil {
		return err
	}
	for _, sub := range []string{l.Tasks(), l.Allocs()} {
		if err := MkdirDurable(sub); err != nil {
			return fmt.Errorf("statedir: create %s: %w", sub, err)
		}
		fi, err = os.Lstat(sub)
		if err != nil {
			return fmt.Errorf("statedir: %s: %w", sub, err)
		}
		if err := checkPrivateDir(sub, fi); err != nil {
			return err
		}
	}
	return nil
}

// ErrStateDir: the state directory is unusable as it is (shared, owned by
// someone else, a symbolic link); it is never chmodded.
var ErrStateDir = errors.New("statedir: unusable state directory")

func checkPrivateDir(dir string, fi os.FileInfo) error {
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%w: %s is a symbolic link; give the real directory", ErrStateDir, dir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w: %s is not a directory", ErrStateDir, dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not by you (uid %d); use a directory of your own", ErrStateDir, dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 || fi.Mode()&(os.ModeSticky|os.ModeSetgid|os.ModeSetuid) != 0 {
		return fmt.Errorf("%w: %s has mode %s; it must be private (chmod 700 %s), or pick another with --state-dir",
			ErrStateDir, dir, fi.Mode().Perm(), dir)
	}
	return nil
}
