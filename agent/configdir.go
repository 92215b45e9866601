package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/job"
)

// TaskFileExts are the extensions of the config dir's files: task and job
// files (a Nomad job file is often web.nomad, or web.nomad.hcl).
var TaskFileExts = []string{".hcl", ".nomad"}

// maxTaskFile bounds a task file the agent reads.
const maxTaskFile = MaxFileText

// MaxFileText bounds a task or job file the agent reads, from its config
// dir or in a request (a client that holds a larger one says what is
// wrong with it itself: see cmd/tether's planJob).
const MaxFileText = 4 << 20

// readFunc reads a file's text (with inputs) into a declaration named name
// ("": the job's own name): the converger's, through package job.
type readFunc func(file, name string, text []byte, in job.Inputs) Declared

// absPath makes path absolute against the working directory.
func absPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("agent: %s: %w", path, err)
	}
	return abs, nil
}

// trusted is the ownership rule of the config dir and its files: root or
// the agent's own user, and writable by nobody else.
func trusted(what string, st *unix.Stat_t) error {
	uid := uint32(os.Geteuid())
	if st.Uid != 0 && st.Uid != uid {
		return fmt.Errorf("%w: %s is owned by uid %d, neither root nor the agent's user (uid %d): chown it, or take it out of the config dir",
			ErrConfigDir, what, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%w: %s is writable by its group or by others (mode %04o): chmod go-w it",
			ErrConfigDir, what, st.Mode&0o7777)
	}
	return nil
}

// OpenConfigDir checks dir as a config dir (a directory, owned by root or
// the agent's user, writable by no one else) and returns its real path
// (dir itself may be a symbolic link; the files in it are resolved within
// the real directory).
func OpenConfigDir(dir string) (string, error) {
	abs, err := absPath(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("%w: --config-dir %s: %w", ErrConfigDir, dir, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(real, &st); err != nil {
		return "", fmt.Errorf("%w: --config-dir %s: %w", ErrConfigDir, dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("%w: --config-dir %s is not a directory", ErrConfigDir, dir)
	}
	if err := trusted("the config dir "+real, &st); err != nil {
		return "", err
	}
	return real, nil
}

// scanConfigDir reads every task or job file of dir (its real path): each
// entry with a task file's extension (not a hidden one), opened beneath
// dir (openat2 RESOLVE_BENEATH: a symbolic link may point within dir,
// never out of it), a regular file owned by root or the agent's user and
// writable by no one else, read through read with the agent's NOMAD_VAR_
// variables. A file refused (unsafe, not readable, refused by the job
// path) is a FileProblem; the error is for a dir that cannot be read or is
// no longer safe (then nothing of it is believed).
func scanConfigDir(dir string, read readFunc) ([]Declared, []FileProblem, error) {
	if _, err := OpenConfigDir(dir); err != nil {
		return nil, nil, err
	}
	d, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: open %s: %w", ErrConfigDir, dir, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: read %s: %w", ErrConfigDir, dir, err)
	}
	dfd := int(d.Fd())
	slices.Sort(names)
	env := job.VarEnv(environ())
	var decl []Declared
	var probs []FileProblem
	for _, name := range names {
		if !slices.Contains(TaskFileExts, filepath.Ext(name)) || strings.HasPrefix(name, ".") {
			continue
		}
		path := filepath.Join(dir, name)
		src, err := readBeneath(dfd, dir, name)
		if err != nil {
			probs = append(probs, FileProblem{File: path, Err: err})
			continue
		}
		dcl := read(path, "", src, job.Inputs{Env: env})
		dcl.Text = nil // a config dir's file is read again from the dir
		if dcl.Err != "" {
			probs = append(probs, FileProblem{File: path, Err: errors.New(dcl.Err)})
			continue
		}
		if err := validName(dcl.Name); err != nil {
			probs = append(probs, FileProblem{File: path, Err: err})
			continue
		}
		decl = append(decl, dcl)
	}
	return decl, probs, nil
}

// environ is the process's environment as a map.
func environ() map[string]string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// readBeneath reads name, a task file of the directory dfd (at dir),
// resolved beneath it, after checking what it opened.
func readBeneath(dfd int, dir, name string) ([]byte, error) {
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NOCTTY | unix.O_NONBLOCK,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("%w: it is a symbolic link out of %s: refused", ErrConfigDir, dir)
	case errors.Is(err, unix.ENOSYS):
		return nil, fmt.Errorf("%w: this kernel has no openat2 (Linux 5.6 or later): task files cannot be read safely", ErrConfigDir)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("%w: it is a dangling symbolic link, or was removed", ErrConfigDir)
	case err != nil:
		return nil, fmt.Errorf("%w: open: %w", ErrConfigDir, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, name))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("%w: stat: %w", ErrConfigDir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: not a regular file", ErrConfigDir)
	}
	if err := trusted("the file", &st); err != nil {
		return nil, err
	}
	if err := trustedPath(dir, fd); err != nil {
		return nil, err
	}
	if st.Size > maxTaskFile {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrConfigDir, st.Size, maxTaskFile)
	}
	src, err := io.ReadAll(io.LimitReader(f, maxTaskFile+1))
	if err != nil {
		if errors.Is(err, syscall.EAGAIN) {
			return nil, fmt.Errorf("%w: not a regular file", ErrConfigDir)
		}
		return nil, fmt.Errorf("agent: read: %w", err)
	}
	return src, nil
}

// trustedPath checks the directories between dir and the file open at fd
// (a task file reached through a symbolic link into a subdirectory): each
// must be trusted as dir is, or someone else could have put the file there.
func trustedPath(dir string, fd int) error {
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return fmt.Errorf("%w: where does it lead: %w", ErrConfigDir, err)
	}
	if !strings.HasPrefix(real, dir+"/") {
		return fmt.Errorf("%w: it leads to %s, out of %s", ErrConfigDir, real, dir)
	}
	for d := filepath.Dir(real); d != dir; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Lstat(d, &st); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrConfigDir, d, err)
		}
		if err := trusted("its directory "+d, &st); err != nil {
			return err
		}
	}
	return nil
}
