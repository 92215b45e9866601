package logs

import (
	"context"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// pollEvery is how often a follower looks at the files where inotify is
// unavailable.
const pollEvery = 250 * time.Millisecond

// Follow copies the stream to w from the cursor's position as it grows,
// across rotations, until ctx is done; then it copies what had been
// written by then and returns nil. It is woken by inotify on the stream's
// directory, and looks every 250 ms where inotify is unavailable. A
// *GapError (errors.Is ErrGap) means the follower fell behind by more
// than the retained files; the cursor is past the gap, and calling Follow
// again goes on from there.
func Follow(ctx context.Context, c *Cursor, w io.Writer) error {
	return follow(ctx, c, func() error {
		_, err := c.Copy(w)
		return err
	}, true)
}

// follow calls read (which reads the cursor to the stream's end) whenever
// the stream may have grown, until ctx is done; then once more.
func follow(ctx context.Context, c *Cursor, read func() error, inotify bool) error {
	var wake <-chan struct{}
	if inotify {
		wk, stop, err := watchDir(c.s.dir)
		if err == nil {
			defer stop()
			wake = wk
		}
	}
	ticker := time.NewTicker(pollEvery)
	defer ticker.Stop()
	tick := ticker.C
	if wake != nil {
		ticker.Stop()
		tick = nil
	}
	for {
		// The watch is in place before each look, so a change after the
		// look wakes the next one.
		if err := read(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return read()
		case _, ok := <-wake:
			if !ok { // the watch failed: look every pollEvery from now on
				wake, tick = nil, ticker.C
				ticker.Reset(pollEvery)
			}
		case <-tick:
		}
	}
}

// watchDir watches dir with inotify. The channel receives a value after
// any change to the files in it (values coalesce); stop ends the watch.
func watchDir(dir string) (<-chan struct{}, func(), error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, nil, err
	}
	const mask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM |
		unix.IN_DELETE | unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		_ = unix.Close(fd)
		return nil, nil, err
	}
	// A non-blocking fd goes through the runtime's poller, so Close
	// unblocks the reader.
	f := os.NewFile(uintptr(fd), "inotify")
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(wake) // a follower still looking then falls back to polling
		buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
		for {
			if _, err := f.Read(buf); err != nil {
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
	}, nil
}
