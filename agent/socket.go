package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The agent's files in the state directory.
const (
	// SocketFile is the agent's socket: 0600, in the 0700 state directory.
	SocketFile = "agent.sock"
	// LockFile is the agent's lock: an exclusive flock held for the agent's
	// life (the kernel lets go of it when the agent dies, however it dies),
	// holding the agent's pid for the error a second agent gives.
	LockFile = "agent.lock"
)

// SocketPath is the agent's socket in a state directory.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, SocketFile) }

// lockAgent takes the state directory's agent lock, without waiting: a
// second agent fails at once, naming the first's pid.
func lockAgent(stateDir string) (*os.File, error) {
	path := filepath.Join(stateDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("agent: open %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &RunningError{StateDir: stateDir, PID: readPID(path)}
		}
		return nil, fmt.Errorf("agent: lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
		if err != nil {
			_ = f.Close()
			return nil, fmt.Errorf("agent: record the pid in %s: %w", path, err)
		}
	}
	return f, nil
}

// readPID reads the pid an agent recorded in its lock file (0 if none).
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// shortPath turns a socket path of any length into one that fits a
// sockaddr_un (108 bytes): /proc/self/fd/N/<base>, N an O_PATH descriptor
// of its directory, which the caller closes after bind or connect.
func shortPath(path string) (string, int, error) {
	if len(path) < 100 {
		return path, -1, nil
	}
	dfd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, fmt.Errorf("%w: open the directory of %s: %w", ErrSocket, path, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(dfd) + "/" + filepath.Base(path), dfd, nil
}

// listen binds the agent's socket, 0600. The caller holds the agent lock:
// a socket already there is a killed agent's, and is removed (only a
// socket: anything else at that path is an error, left as it is).
func listen(stateDir string, removedStale func()) (*net.UnixListener, error) {
	path := SocketPath(stateDir)
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("%w: %s exists and is not a socket (%s); move it aside", ErrSocket, path, fi.Mode().Type())
	case err == nil:
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("%w: remove the stale socket %s: %w", ErrSocket, path, err)
		}
		removedStale()
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s: %w", ErrSocket, path, err)
	}
	sp, dfd, err := shortPath(path)
	if err != nil {
		return nil, err
	}
	if dfd >= 0 {
		defer unix.Close(dfd)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("%w: listen on %s: %w", ErrSocket, path, err)
	}
	ln.SetUnlinkOnClose(false) // the agent removes it, by its real path, while it holds the lock
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		_ = os.Remove(path)
		return nil, fmt.Errorf("%w: chmod %s: %w", ErrSocket, path, err)
	}
	return ln, nil
}

// dial connects to the agent's socket. No socket, or one nobody listens on,
// is ErrNoAgent, at once.
func dial(ctx context.Context, stateDir string) (*net.UnixConn, error) {
	path := SocketPath(stateDir)
	sp, dfd, err := shortPath(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: %w", ErrNoAgent, stateDir, err)
		}
		return nil, err
	}
	if dfd >= 0 {
		defer unix.Close(dfd)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", sp)
	if err != nil {
		switch {
		case errors.Is(err, syscall.ENOENT):
			return nil, fmt.Errorf("%w (no socket at %s)", ErrNoAgent, path)
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%w (nothing listens on %s: a killed agent's socket)", ErrNoAgent, path)
		case errors.Is(err, syscall.ENOTSOCK):
			return nil, fmt.Errorf("%w: %s is not a socket", ErrSocket, path)
		}
		return nil, fmt.Errorf("agent: connect %s: %w", path, err)
	}
	return c.(*net.UnixConn), nil
}

// peerCred is the SO_PEERCRED of a connected unix socket: for an accepted
// connection the client's, for a dialled one the agent's (as it was when
// it called listen).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// dirOwner is the owner of a directory.
func dirOwner(dir string) (uint32, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("agent: no owner for %s", dir)
	}
	return st.Uid, nil
}

// allowed is the peer rule of both ends: root, or the state directory's
// owner.
func allowed(uid, owner uint32) bool { return uid == 0 || uid == owner }
