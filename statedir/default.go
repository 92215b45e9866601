package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SystemDir is the state directory of the system's agent: the one
// tether-agent.service gives it (StateDirectory=tether, --state-dir
// /var/lib/tether).
const SystemDir = "/var/lib/tether"

// DefaultEnv is what the default state directory depends on.
type DefaultEnv struct {
	Getenv func(string) string
	Euid   int
	// Home is the user's home directory ("" with HomeErr: none).
	Home    string
	HomeErr error
	// IsDir reports whether a path is a directory.
	IsDir func(string) bool
}

// HostEnv is this process's DefaultEnv.
func HostEnv() DefaultEnv {
	home, err := os.UserHomeDir()
	return DefaultEnv{Getenv: os.Getenv, Euid: os.Geteuid(), Home: home, HomeErr: err, IsDir: func(p string) bool {
		fi, err := os.Stat(p)
		return err == nil && fi.IsDir()
	}}
}

// Default returns the state directory when none is given (--state-dir):
//
//  1. $TETHER_STATE_DIR;
//  2. for root, SystemDir when it exists: the system's agent's, so that
//     `tether status` as root on a host where tether-agent.service runs
//     talks to that agent, whatever $XDG_STATE_HOME says (a per-session
//     variable that sudo -E or a profile may carry into a root shell,
//     which must not split root's commands from the system's agent);
//  3. $XDG_STATE_HOME/tether (an absolute one);
//  4. ~/.local/state/tether.
//
// perUser is what rules 3 and 4 give, which rule 2 passed over (""
// otherwise): a root that used tether before tether-agent.service has
// its tasks there, and should be told (see PassedOver).
func Default(e DefaultEnv) (dir, perUser string, err error) {
	if d := e.Getenv("TETHER_STATE_DIR"); d != "" {
		return d, "", nil
	}
	if x := e.Getenv("XDG_STATE_HOME"); x != "" && filepath.IsAbs(x) {
		perUser = filepath.Join(x, "tether")
	} else if e.HomeErr == nil && e.Home != "" {
		perUser = filepath.Join(e.Home, ".local", "state", "tether")
	}
	if e.Euid == 0 && e.IsDir(SystemDir) {
		return SystemDir, perUser, nil
	}
	if perUser == "" {
		err := e.HomeErr
		if err == nil {
			err = errors.New("no home directory")
		}
		return "", "", fmt.Errorf("no state directory: %w; pass --state-dir or set TETHER_STATE_DIR", err)
	}
	return perUser, "", nil
}

// PassedOver reports whether the per-user directory that Default passed
// over for SystemDir holds a store of its own (tasks a root ran before the
// system's agent, which live on there and must not be forgotten).
func PassedOver(perUser string) bool {
	if perUser == "" {
		return false
	}
	_, err := os.Stat(Layout{Dir: perUser}.Store())
	return err == nil
}
