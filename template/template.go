package template

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"text/template/parse"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/taskdir"
)

// ChangeMode is what happens to the task when a rendered template changes
// (fsm.ChangeMode: the spec records it).
type ChangeMode = fsm.ChangeMode

// Nomad's change modes.
const (
	ChangeRestart = fsm.ChangeRestart // restart the task (Nomad's default)
	ChangeSignal  = fsm.ChangeSignal  // send it the template's change_signal
	ChangeNoop    = fsm.ChangeNoop    // nothing: the task reads the file when it wants
	// ChangeScript runs change_script inside the task (Nomad 1.5); parsed,
	// reported, not run by this package.
	ChangeScript = fsm.ChangeScript
)

// ParseChangeMode reads a change_mode value.
func ParseChangeMode(s string) (ChangeMode, error) {
	for m := ChangeRestart; m.Valid(); m++ {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: change_mode %q: use \"restart\", \"signal\", \"noop\" or \"script\"", ErrBadTemplate, s)
}

// DefaultPerms are a rendered file's permissions when the block sets none
// (Nomad's "644").
const DefaultPerms os.FileMode = 0o644

// DefaultMaxBytes bounds a template's source, each file it reads and its
// output.
const DefaultMaxBytes = 16 << 20

// Template is one template block, its run-time values interpolated
// (fsm.Template: the spec records it).
type Template = fsm.Template

// Check validates what needs no host: exactly one of data and source, a
// destination, a signal when the mode is signal (an ErrBadTemplate).
func Check(t Template) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadTemplate, err)
	}
	return nil
}

// Renderer renders a task's templates.
type Renderer struct {
	// Layout is where the task's directories are.
	Layout taskdir.Layout
	// Env is the task's environment: what env reads.
	Env map[string]string
	// AllowRead lists host directories a source or file may be read from
	// besides the task and alloc directories.
	AllowRead []string
	// Owner owns what is rendered when a template sets no uid or gid (the
	// task's user); taskdir.Keep keeps the renderer's.
	Owner taskdir.Owner
	// MaxBytes bounds a source, each file read and the output (0:
	// DefaultMaxBytes).
	MaxBytes int64
}

// Result is what rendering one template did.
type Result struct {
	// Path is the destination's host path.
	Path string
	// Changed is set when the file's content is new.
	Changed bool
	// Env holds the output's variables for an env = true template.
	Env map[string]string
	// Deps are the host paths the template read (its source and every file):
	// what a Watcher watches.
	Deps []string
}

func (r *Renderer) max() int64 {
	if r.MaxBytes > 0 {
		return r.MaxBytes
	}
	return DefaultMaxBytes
}

// read reads a host path (relative to the task directory) beneath the
// task and alloc directories or an allowed one.
func (r *Renderer) read(p string) ([]byte, string, error) {
	t, err := r.Layout.ResolveRead(p, r.AllowRead)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrRead, p, err)
	}
	root, err := taskdir.OpenRoot(t.Root)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrRead, p, err)
	}
	defer root.Close()
	var b []byte
	if t.Root == r.Layout.TaskDir || t.Root == r.Layout.AllocDir {
		// The task's own directories: what the task may have linked there
		// is read only if it is the task's.
		b, err = root.ReadFileAs(t.Rel, r.max(), r.Owner.UID)
	} else {
		b, err = root.ReadFile(t.Rel, r.max())
	}
	if err != nil {
		return nil, "", fmt.Errorf("%w: %s: %w", ErrRead, p, err)
	}
	return b, t.Host(), nil
}

// Execute renders t to bytes without writing anything, and returns the
// host paths it read.
func (r *Renderer) Execute(ctx context.Context, t Template) ([]byte, []string, error) {
	if err := Check(t); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	text := t.Data
	var deps []string
	if t.Source != "" {
		b, host, err := r.read(t.Source)
		if err != nil {
			return nil, nil, err
		}
		text, deps = string(b), append(deps, host)
	}
	left, right := t.LeftDelim, t.RightDelim
	if left == "" {
		left = "{{"
	}
	if right == "" {
		right = "}}"
	}
	fc := &funcCtx{r: r}
	tmpl := template.New(t.Destination).Delims(left, right).Funcs(fc.funcs())
	if t.ErrMissingKey {
		tmpl = tmpl.Option("missingkey=error")
	}
	if _, err := tmpl.Parse(text); err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadTemplate, t.Name(), err)
	}
	for _, tt := range tmpl.Templates() {
		if tt.Tree == nil {
			continue
		}
		if err := checkFuncs(tt.Tree.Root); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.Name(), err)
		}
	}
	var out limitedBuffer
	out.max = r.max()
	if err := tmpl.Execute(&out, nil); err != nil {
		if fc.err != nil {
			return nil, nil, fmt.Errorf("%s: %w", t.Name(), fc.err)
		}
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrBadTemplate, t.Name(), err)
	}
	return out.Bytes(), append(deps, fc.deps...), nil
}

// Render renders t and writes the output to its destination (only when
// its content changed), as Nomad does before the task starts.
func (r *Renderer) Render(ctx context.Context, t Template) (Result, error) {
	out, deps, err := r.Execute(ctx, t)
	if err != nil {
		return Result{}, err
	}
	res, err := r.write(t, out)
	res.Deps = deps
	return res, err
}

func (r *Renderer) write(t Template, out []byte) (Result, error) {
	dst, err := r.Layout.Resolve(t.Destination)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %s: %w", ErrWrite, t.Name(), err)
	}
	res := Result{Path: dst.Host()}
	if t.Env {
		if res.Env, err = ParseEnvFile(out); err != nil {
			return res, fmt.Errorf("%s: %w", t.Name(), err)
		}
	}
	root, err := taskdir.OpenRoot(dst.Root)
	if err != nil {
		return res, fmt.Errorf("%w: %s: %w", ErrWrite, t.Name(), err)
	}
	defer root.Close()
	perms := t.Perms
	if perms == 0 {
		perms = DefaultPerms
	}
	owner := r.Owner
	if t.UID != nil {
		owner.UID = *t.UID
	}
	if t.GID != nil {
		owner.GID = *t.GID
	}
	if old, err := root.ReadFile(dst.Rel, r.max()); err == nil && bytes.Equal(old, out) {
		if fi, err := root.Lstat(dst.Rel); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm() == perms.Perm() && ownedBy(fi, owner) {
			return res, nil
		}
	}
	if err := root.WriteFile(dst.Rel, out, perms, owner); err != nil {
		return res, fmt.Errorf("%w: %s: %w", ErrWrite, t.Name(), err)
	}
	res.Changed = true
	return res, nil
}

func ownedBy(fi os.FileInfo, o taskdir.Owner) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	uid, gid := o.UID, o.GID
	if uid < 0 {
		uid = unix.Geteuid()
	}
	if gid < 0 {
		gid = unix.Getegid()
	}
	return int(st.Uid) == uid && int(st.Gid) == gid
}

// RenderAll renders every template in order and returns the environment
// the env = true ones add (a later one wins a name).
func (r *Renderer) RenderAll(ctx context.Context, ts []Template) ([]Result, map[string]string, error) {
	env := map[string]string{}
	var out []Result
	for _, t := range ts {
		res, err := r.Render(ctx, t)
		if err != nil {
			return out, nil, err
		}
		maps.Copy(env, res.Env)
		out = append(out, res)
	}
	return out, env, nil
}

// limitedBuffer refuses output past max bytes.
type limitedBuffer struct {
	bytes.Buffer
	max int64
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len()+len(p)) > b.max {
		return 0, fmt.Errorf("%w: the output is larger than %d bytes", ErrBadTemplate, b.max)
	}
	return b.Buffer.Write(p)
}

// checkFuncs refuses a template that names a server or unsupported
// function anywhere, even in a branch that would not run: Nomad would
// block on the server until it answered.
func checkFuncs(n parse.Node) error {
	var err error
	var walk func(parse.Node)
	walk = func(n parse.Node) {
		if n == nil || err != nil {
			return
		}
		switch n := n.(type) {
		case *parse.ListNode:
			if n == nil {
				return
			}
			for _, c := range n.Nodes {
				walk(c)
			}
		case *parse.ActionNode:
			walk(n.Pipe)
		case *parse.IfNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.RangeNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.WithNode:
			walk(n.Pipe)
			walk(n.List)
			walk(n.ElseList)
		case *parse.TemplateNode:
			walk(n.Pipe)
		case *parse.PipeNode:
			if n == nil {
				return
			}
			for _, c := range n.Cmds {
				walk(c)
			}
		case *parse.CommandNode:
			for _, a := range n.Args {
				walk(a)
			}
		case *parse.ChainNode:
			walk(n.Node)
		case *parse.IdentifierNode:
			if e := refusedFunc(n.Ident); e != nil {
				err = e
			}
		}
	}
	walk(n)
	return err
}

// ParseEnvFile reads KEY=VALUE lines as Nomad reads an env = true
// template: blank lines and lines starting with # are skipped, an
// "export " prefix is allowed, a value in double quotes may hold \n, \t,
// \" and \\ escapes, one in single quotes is taken as is.
func ParseEnvFile(b []byte) (map[string]string, error) {
	env := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(strings.TrimSuffix(line, "\r"))
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		line = strings.TrimPrefix(line, "export ")
		k, v, ok := strings.Cut(line, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" || strings.ContainsAny(k, " \t\"'") {
			return nil, fmt.Errorf("%w: line %d: %q is not KEY=VALUE", ErrEnvFile, i+1, line)
		}
		v = strings.TrimSpace(v)
		switch {
		case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
			u, err := strconv.Unquote(v)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: value of %s: %w", ErrEnvFile, i+1, k, err)
			}
			v = u
		case len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'':
			v = v[1 : len(v)-1]
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, fmt.Errorf("%w: line %d: the value of %s holds a NUL byte", ErrEnvFile, i+1, k)
		}
		env[k] = v
	}
	return env, nil
}
