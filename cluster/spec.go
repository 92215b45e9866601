package cluster

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskfile"
)

// ParsedSpec is a desired task file read as its node's agent reads it.
type ParsedSpec struct {
	// Name is the task's name (taskfile's File.Name): the desired key's
	// last part, and the name its tasks get on the node.
	Name string
	// Spec is the task's spec, validated (fsm.Spec.Validate) and with no
	// relative path in it (CheckPaths). The node's allow lists
	// (capabilities, paths, chroot) are the node's to apply.
	Spec fsm.Spec
	// Notes are the parser's warnings and notices (what of a Nomad job
	// file tether ignores), for the caller to show or log.
	Notes []string
}

// ParseDesired reads a desired task file: ValidateSpec's checks of its
// size and form, then the task file parser with no inputs (no -var: a
// desired file must stand alone, as a node reads it), the task sel (its
// name or GROUP.TASK; "" for the file's only runnable task), its static
// spec, fsm's validation, and CheckPaths. filename names the file in
// messages.
//
// `tether cluster start` runs it before it writes anything to etcd, and
// the node's agent runs it on what it reads from etcd (with sel the
// desired key's name, which must then be the task's name): a file is
// accepted by both or refused by both.
func ParseDesired(filename, sel string, src []byte) (ParsedSpec, error) {
	bad := func(format string, args ...any) (ParsedSpec, error) {
		return ParsedSpec{}, fmt.Errorf("%w %s: "+format, append([]any{ErrInvalidSpec, filename}, args...)...)
	}
	if err := checkText(src); err != nil {
		return bad("%v", err)
	}
	tf, diags := taskfile.Parse(filename, src, taskfile.Options{})
	var p ParsedSpec
	var errs []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			errs = append(errs, taskfile.FormatDiag(d))
		} else {
			p.Notes = append(p.Notes, taskfile.FormatDiag(d))
		}
	}
	if len(errs) > 0 {
		return bad("%s", strings.Join(errs, "; "))
	}
	for _, n := range tf.Notices {
		p.Notes = append(p.Notes, filename+": "+n.String())
	}
	t, err := tf.Find(sel)
	if err != nil {
		return ParsedSpec{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	spec, err := t.StaticSpec()
	if err != nil {
		return ParsedSpec{}, fmt.Errorf("%w %s: %w", ErrInvalidSpec, filename, err)
	}
	spec.Name = tf.Name(t)
	if err := ValidateName(spec.Name); err != nil {
		return bad("task %q cannot be told to a node: its name is the key of its desired state: %v; rename the task", spec.Name, err)
	}
	if err := spec.Validate(); err != nil {
		return ParsedSpec{}, fmt.Errorf("%w %s: %w", ErrInvalidSpec, filename, err)
	}
	if err := CheckPaths(spec); err != nil {
		return ParsedSpec{}, fmt.Errorf("%w %s: %w", ErrInvalidSpec, filename, err)
	}
	p.Name, p.Spec = spec.Name, spec
	return p, nil
}

// CheckPaths refuses a relative path in a desired spec. A file of the
// agent's --config-dir has a directory its relative paths could mean; a
// spec from etcd has none, and the agent's own working directory is no
// operator's choice. So the command is an absolute path or a bare name
// (looked up in the task's $PATH, as for any task), and work_dir is
// absolute.
func CheckPaths(spec fsm.Spec) error {
	if c := spec.Command; strings.ContainsRune(c, '/') && !filepath.IsAbs(c) {
		return fmt.Errorf("%w: command %q: a desired task has no directory of its own to resolve it against; give an absolute path (or a bare name looked up in $PATH)", ErrRelativePath, c)
	}
	if d := spec.Dir; d != "" && !filepath.IsAbs(d) {
		return fmt.Errorf("%w: work_dir %q: a desired task has no directory of its own to resolve it against; give an absolute path", ErrRelativePath, d)
	}
	return nil
}
