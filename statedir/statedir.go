package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrInvalidTaskID: a task id that is empty, too long, or could escape the
// state directory.
var ErrInvalidTaskID = errors.New("statedir: invalid task id")

// ValidateTaskID refuses ids that are empty, longer than 63 bytes, or
// could escape the state directory ("..", slashes, leading dots): an id is
// 1 to 63 of [A-Za-z0-9_.-], starting with a letter or digit. (Written out
// rather than a regexp: compiling one at package init cost every process
// of this binary, the executor and the shim among them, 1.6 ms here.)
func ValidateTaskID(id string) error {
	ok := len(id) >= 1 && len(id) <= 63
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '_' || c == '.' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%w %q: use 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidTaskID, id)
	}
	return nil
}

// MkdirDurable creates dir (0700, its parent must exist) and fsyncs the
// parent, so that the directory (and what is written durably into it: the
// executor's identity, the task's exit status) survives a power loss. An
// existing directory is left as it is.
func MkdirDurable(dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return err
	}
	d, err := os.Open(filepath.Dir(dir))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
