//go:build linux

package server

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tether-fsm/tether/executor/internal/spec"
	"github.com/tether-fsm/tether/executor/internal/wire"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/logs"
	"github.com/tether-fsm/tether/statedir"
)

// outputGrace bounds how long the executor waits, once its task's whole
// tree is gone, for the copies of its output to reach the end of their
// pipes: a process outside the tree that was handed the pipe (over a unix
// socket) could otherwise hold the executor forever.
const outputGrace = 2 * time.Second

// JournalSocket is where a task's output is forwarded with logs {
// journald = true }: the journal's (logs.JournalSocket). A test's
// executor, a process of its own, points it at a socket of the test's
// before it serves.
var JournalSocket = logs.JournalSocket

// output is one of the task's streams: the read end of its pipe, copied by
// a goroutine of its own (so the executor's loop never blocks on a write)
// into a rotating writer, and into the journal with logs { journald =
// true } (which never blocks the copy: logs.Journal).
type output struct {
	name string
	w    *logs.Writer
	j    *logs.Journal // nil: not forwarded
	r    *os.File
	c    *logs.Copier
	done bool
}

// openOutputs opens the task's stdout and stderr: a rotating writer and a
// pipe each, or /dev/null when logs are disabled; with journald, a
// connection to the journal each too. It returns the child's ends (the
// caller closes them, except devnull, after the fork). A host without a
// journal is a warning (the output is kept in its files), not a failure.
func (s *server) openOutputs(cfg logs.Config, tu spec.User, devnull *os.File, name string) ([]*output, [2]*os.File, []fsm.Warning, error) {
	var ends [2]*os.File
	if cfg.Disabled {
		ends[0], ends[1] = devnull, devnull
		return nil, ends, nil, nil
	}
	var outs []*output
	var warns []fsm.Warning
	fail := func(err error) ([]*output, [2]*os.File, []fsm.Warning, error) {
		for _, o := range outs {
			o.abort()
		}
		for _, f := range ends {
			if f != nil {
				f.Close()
			}
		}
		return nil, [2]*os.File{}, nil, fmt.Errorf("%w: task output: %w", wire.ErrLaunch, err)
	}
	opts := logs.Options{Chown: tu.Set(), UID: tu.UID, GID: tu.GID, Logger: s.log.Named("logs")}
	for i, stream := range []string{statedir.StdoutFile, statedir.StderrFile} {
		w, err := logs.Open(s.taskDir, stream, cfg, opts)
		if err != nil {
			return fail(err)
		}
		r, pw, err := os.Pipe()
		if err != nil {
			w.Close()
			return fail(err)
		}
		outs = append(outs, &output{name: stream, w: w, r: r})
		ends[i] = pw
	}
	if cfg.Journald {
		for _, o := range outs {
			j, err := logs.OpenJournal(JournalSocket, logs.JournalFields{TaskID: filepath.Base(s.taskDir), TaskName: name, Stream: o.name})
			if errors.Is(err, logs.ErrNoJournal) {
				s.log.Warn("logs { journald = true }: no journal on this host; the task's output is kept in its files only", "err", err)
				warns = append(warns, fsm.Warning{Kind: fsm.WarnOther,
					Text: fmt.Sprintf("logs { journald = true }: %v; the task's output is kept in its files only", err)})
				break
			}
			if err != nil {
				return fail(err)
			}
			o.j = j
		}
	}
	return outs, ends, warns, nil
}

// start starts copying the stream: into its files, and into the journal
// first when it is forwarded (a journal never fails nor blocks a write,
// so the files' writer sees every byte as it would alone).
func (o *output) start() {
	var w io.Writer = o.w
	if o.j != nil {
		w = io.MultiWriter(o.j, o.w)
	}
	o.c = logs.StartCopy(w, o.r)
}

// abort closes a stream whose task never started.
func (o *output) abort() {
	o.r.Close()
	o.w.Close()
	if o.j != nil {
		o.j.Close()
	}
	o.done = true
}

// doneC is closed when the stream's copy has ended; nil when there is
// nothing to wait for.
func (o *output) doneC() <-chan struct{} {
	if o == nil || o.done || o.c == nil {
		return nil
	}
	return o.c.Done()
}

// finish closes the stream once its copy has ended and logs what was lost.
func (s *server) finishOutput(o *output) {
	n, err := o.c.Wait()
	o.r.Close()
	st := o.w.Stats()
	if cerr := o.w.Close(); err == nil {
		err = cerr
	}
	o.done = true
	if o.j != nil {
		_ = o.j.Close()
		if d := o.j.Dropped(); d > 0 {
			s.log.Warn("task output lines the journal did not take (its queue was full)", "stream", o.name, "lines", d, "forwarded", o.j.Sent())
		}
	}
	switch {
	case st.Dropped > 0:
		s.log.Warn("task output dropped (the disk was full or a rotation failed)", "stream", o.name, "bytes", n, "dropped", st.Dropped, "err", err)
	case err != nil:
		s.log.Warn("copying task output", "stream", o.name, "bytes", n, "err", err)
	default:
		s.log.Debug("task output copied", "stream", o.name, "bytes", n, "rotations", st.Rotations)
	}
}

// outputDone reports whether every stream's copy has ended.
func (s *server) outputDone() bool {
	for _, o := range s.outs {
		if !o.done {
			return false
		}
	}
	return true
}

// cutOutput ends the copies that are still reading: the task's tree is
// gone, and whatever still holds their pipes is no part of it.
func (s *server) cutOutput() {
	for _, o := range s.outs {
		if !o.done {
			_ = o.r.SetReadDeadline(time.Now())
		}
	}
}
