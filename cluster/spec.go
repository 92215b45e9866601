package cluster

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tether-fsm/tether/job"
)

// ParsedSpec is a desired file read as its node's agent reads it.
type ParsedSpec struct {
	// Name is the desired entry's name: the job's (package job's Job.Name),
	// or the task's a selection named: the desired key's last part.
	Name string
	// Inputs are what the node reads the file with: the selection of one
	// task, when the key names one (a desired file has no -var: it must
	// stand alone, as a node reads it).
	Inputs job.Inputs
	// Notes are the parser's warnings and notices (what of a Nomad job
	// file tether ignores), for the caller to show or log.
	Notes []string
}

// ParseDesired reads a desired file: ValidateSpec's checks of its size and
// form, then the job path's parse and plan (package job's Parse: no host
// and no allow list is checked here; the node's agent reads the file
// again through its own job path, with its host, its allow lists and its
// check of every spec), the selection sel, and CheckPaths on every task.
// sel is "" (the whole file: every group tether runs), the whole job's
// name, or one task's name (or GROUP.TASK) to run alone. filename names
// the file in messages.
//
// `tether cluster start` runs it before it writes anything to etcd, and
// the node's agent runs it on what it reads from etcd (with sel the
// desired key's name): a file is accepted by both or refused by both.
func ParseDesired(filename, sel string, src []byte) (ParsedSpec, error) {
	return parseDesired(filename, sel, src, job.Parse)
}

// ReadDesired is ParseDesired as the node judges a spec from etcd before
// it keeps it (the local copy) or hands it to its agent: the file parsed
// under the node's policy for remote specs (p.ForRemote(): its bound on
// count, the drivers --allow-remote-drivers allows, the host namespaces
// --allow-host-namespaces allows; job.Vet), so that a spec past a parse
// limit, or asking a driver or a namespace the node does not allow, is
// refused by name, the same on every host, before anything of it is
// written. The agent reads what passes through its job path again, with
// its host and its check of every spec.
func ReadDesired(filename, sel string, src []byte, p job.Policy) (ParsedSpec, error) {
	p = p.ForRemote()
	return parseDesired(filename, sel, src, func(s job.Source, in job.Inputs) (*job.Job, error) { return job.Vet(s, in, p) })
}

// parseDesired is ParseDesired with read as the job path's parse.
func parseDesired(filename, sel string, src []byte, read func(job.Source, job.Inputs) (*job.Job, error)) (ParsedSpec, error) {
	bad := func(format string, args ...any) (ParsedSpec, error) {
		return ParsedSpec{}, fmt.Errorf("%w %s: "+format, append([]any{ErrInvalidSpec, filename}, args...)...)
	}
	if err := checkText(src); err != nil {
		return bad("%v", err)
	}
	text := job.Source{File: filename, Text: src}
	j, err := read(text, job.Inputs{})
	var in job.Inputs
	if sel != "" && (err != nil || j == nil || j.Name != sel) && !errors.Is(err, job.ErrNotAllowed) {
		in.Task = sel
		j, err = read(text, in)
	}
	if err != nil {
		return ParsedSpec{}, fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	p := ParsedSpec{Name: j.Name, Inputs: in, Notes: j.Notes}
	if err := ValidateName(p.Name); err != nil {
		return bad("%q cannot be told to a node: its name is the key of its desired state: %v; rename the task (or the job)", p.Name, err)
	}
	for _, g := range j.Groups {
		for _, t := range g.Tasks {
			if err := CheckPaths(t.Spec.Command, t.Spec.Dir); err != nil {
				return ParsedSpec{}, fmt.Errorf("%w %s: task %q: %w", ErrInvalidSpec, filename, t.Address(), err)
			}
		}
	}
	return p, nil
}

// CheckPaths refuses a relative command or work_dir in a desired file as
// written (before run-time references are resolved: "${NOMAD_TASK_DIR}/x"
// is absolute once they are). A file of the agent's --config-dir is the
// operator's own; a file from etcd is anyone's with write access to it,
// and gets no more than an absolute path or a bare name (looked up in the
// task's $PATH, as for any task).
func CheckPaths(command, dir string) error {
	if c := command; strings.ContainsRune(c, '/') && !filepath.IsAbs(c) && !strings.HasPrefix(c, "${") {
		return fmt.Errorf("%w: command %q: give an absolute path (or a bare name looked up in $PATH, or one under ${NOMAD_TASK_DIR})", ErrRelativePath, c)
	}
	if d := dir; d != "" && !filepath.IsAbs(d) && !strings.HasPrefix(d, "${") {
		return fmt.Errorf("%w: work_dir %q: give an absolute path", ErrRelativePath, d)
	}
	return nil
}
