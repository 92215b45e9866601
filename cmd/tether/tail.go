package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// tailStream copies one file of a task directory to out as it grows.
type tailStream struct {
	name string
	out  io.Writer
	f    *os.File
}

// tailer follows a task's output files. It is woken by inotify on the
// task directory; where inotify is unavailable it falls back to checking
// every tailFallback.
type tailer struct {
	dir     string
	streams []tailStream
	log     hclog.Logger

	quit chan struct{}
	done chan struct{}
	once sync.Once
}

const tailFallback = 100 * time.Millisecond

// startTail starts following the named files in dir.
func startTail(log hclog.Logger, dir string, streams []tailStream) *tailer {
	t := &tailer{dir: dir, streams: streams, log: log, quit: make(chan struct{}), done: make(chan struct{})}
	go t.run()
	return t
}

// stop copies what is left and stops following. Safe on nil.
func (t *tailer) stop() {
	if t == nil {
		return
	}
	t.once.Do(func() { close(t.quit) })
	<-t.done
}

func (t *tailer) run() {
	defer close(t.done)
	defer func() {
		for _, s := range t.streams {
			if s.f != nil {
				_ = s.f.Close()
			}
		}
	}()
	wake, closeWatch := t.watch()
	defer closeWatch()
	var tick <-chan time.Time
	if wake == nil {
		tk := time.NewTicker(tailFallback)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		t.copyAll()
		select {
		case <-wake:
		case <-tick:
		case <-t.quit:
			t.copyAll()
			return
		}
	}
}

func (t *tailer) copyAll() {
	for i := range t.streams {
		s := &t.streams[i]
		if s.f == nil {
			f, err := os.Open(filepath.Join(t.dir, s.name))
			if err != nil {
				continue // not written yet
			}
			s.f = f
		}
		if _, err := io.Copy(s.out, s.f); err != nil {
			t.log.Debug("copying task output from "+s.name, "err", err)
		}
	}
}

// watch watches the directory with inotify and returns a channel that
// receives a value after changes, and a function that stops watching. A
// nil channel means inotify is unavailable.
func (t *tailer) watch() (<-chan struct{}, func()) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		t.log.Debug("inotify unavailable; checking the output files periodically", "err", err)
		return nil, func() {}
	}
	if _, err := unix.InotifyAddWatch(fd, t.dir, unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		_ = unix.Close(fd)
		t.log.Debug("inotify watch failed; checking the output files periodically", "err", err)
		return nil, func() {}
	}
	// A non-blocking fd goes through the runtime's poller, so Close
	// unblocks the reader.
	f := os.NewFile(uintptr(fd), "inotify")
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				if !errors.Is(err, os.ErrClosed) {
					t.log.Debug("inotify read", "err", err)
				}
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	return wake, func() {
		_ = f.Close()
		wg.Wait()
	}
}
