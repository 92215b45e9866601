package logs

import (
	"errors"
	"fmt"
	"io"
)

// copyChunk is the copier's read size: a pipe's default capacity.
const copyChunk = 64 << 10

// Copy copies from r (the read end of a task's pipe) into w until r
// reports EOF, which is when every process holding the write end has
// closed it. It keeps reading whatever w does, so the task never blocks on
// a full pipe: with a *Writer, output that cannot be written is dropped
// and counted, and an error from any other w is returned only at the end.
// It returns the bytes read and the first read or write error.
func Copy(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, copyChunk)
	var total int64
	var werr error
	for {
		n, err := r.Read(buf)
		total += int64(n)
		if n > 0 && werr == nil {
			if _, e := w.Write(buf[:n]); e != nil {
				werr = fmt.Errorf("logs: copying task output: %w", e)
			}
		}
		if errors.Is(err, io.EOF) {
			return total, werr
		}
		if err != nil {
			if werr != nil {
				return total, werr
			}
			return total, fmt.Errorf("logs: reading task output: %w", err)
		}
	}
}

// Copier runs Copy in a goroutine of its own, so that the executor's main
// loop only selects on Done.
type Copier struct {
	done chan struct{}
	n    int64
	err  error
}

// StartCopy starts copying r into w; see Copy.
func StartCopy(w io.Writer, r io.Reader) *Copier {
	c := &Copier{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.n, c.err = Copy(w, r)
	}()
	return c
}

// Done is closed when the copy has ended.
func (c *Copier) Done() <-chan struct{} { return c.done }

// Wait waits for the copy to end and returns Copy's results.
func (c *Copier) Wait() (int64, error) {
	<-c.done
	return c.n, c.err
}
