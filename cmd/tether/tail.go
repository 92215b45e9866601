package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/tether-fsm/tether/internal/clikit"
	"io"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-fsm/tether/logs"
)

// tailStream is one output stream of a task directory to copy to out.
type tailStream struct {
	name string // the live file: stdoutFile or stderrFile
	out  io.Writer
	// Where to start: the oldest retained output unless last > 0 (that
	// many lines back from the end, tether logs -n) or fromEnd (only what
	// comes next, -n 0).
	last    int
	fromEnd bool
	// warn gets a line about output that rotation deleted before it was
	// read; nil sends it to the logger.
	warn io.Writer
}

// tailer follows a task's output streams across rotations (see package
// logs: woken by inotify, polling only where inotify is unavailable).
type tailer struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startTail starts following the streams in dir.
func startTail(log hclog.Logger, dir string, streams []tailStream) *tailer {
	ctx, cancel := context.WithCancel(context.Background())
	t := &tailer{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			followStream(ctx, log, dir, s)
		}()
	}
	go func() {
		wg.Wait()
		close(t.done)
	}()
	return t
}

// stop copies what is left and stops following. Safe on nil and twice.
func (t *tailer) stop() {
	if t == nil {
		return
	}
	t.cancel()
	<-t.done
}

func followStream(ctx context.Context, log hclog.Logger, dir string, s tailStream) {
	c, err := openStream(dir, s)
	if err != nil {
		log.Warn("cannot follow the task's "+s.name, "err", err)
		return
	}
	defer c.Close()
	for {
		err := logs.Follow(ctx, c, s.out)
		if errors.Is(err, logs.ErrGap) {
			s.reportGap(log, err)
			continue // the cursor is past the gap
		}
		if err != nil {
			log.Debug("stopped following the task's "+s.name, "err", err)
		}
		return
	}
}

// printStream copies a stream's retained output (or its last lines) to
// s.out once, without following it.
func printStream(log hclog.Logger, dir string, s tailStream) error {
	c, err := openStream(dir, s)
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		_, err := c.Copy(s.out)
		if errors.Is(err, logs.ErrGap) {
			s.reportGap(log, err)
			continue
		}
		return err
	}
}

func openStream(dir string, s tailStream) (*logs.Cursor, error) {
	c, err := logs.NewCursor(dir, s.name)
	if err != nil {
		return nil, err
	}
	switch {
	case s.fromEnd:
		err = c.SeekEnd()
	case s.last > 0:
		err = c.SeekLines(s.last)
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (s tailStream) reportGap(log hclog.Logger, err error) {
	if s.warn != nil {
		fmt.Fprintf(s.warn, "tether: %v\n", err)
		return
	}
	log.Warn("task output lost to rotation", "err", err)
}

// prefixWriter writes each line it is given to w with a prefix (the task's
// name: a job's tasks stream their output to one terminal), one whole line
// a write; a line not ended yet waits for its end, or for Flush.
type prefixWriter struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  []byte
	partial []byte
}

// maxPartial is how long a line may grow before it is written unended.
const maxPartial = 64 << 10

func newPrefixWriter(w io.Writer, name string) *prefixWriter {
	return &prefixWriter{w: w, prefix: []byte(clikit.Printable(name) + ": ")}
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.partial = append(p.partial, b...)
			if len(p.partial) >= maxPartial {
				return n, p.flush()
			}
			return n, nil
		}
		line := append(append(append([]byte{}, p.prefix...), p.partial...), b[:i+1]...)
		p.partial, b = p.partial[:0], b[i+1:]
		if _, err := p.w.Write(line); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Flush writes a line not ended yet, ended.
func (p *prefixWriter) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.flush()
}

func (p *prefixWriter) flush() error {
	if len(p.partial) == 0 {
		return nil
	}
	line := append(append(append([]byte{}, p.prefix...), p.partial...), '\n')
	p.partial = p.partial[:0]
	_, err := p.w.Write(line)
	return err
}
