package testproc

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// CheckTask is a helper task for readiness checks, told what to do line by
// line on the fifo args[0] (opened read-write, so it never sees EOF),
// answering each line with one line on the fifo args[1] (with args[2] ==
// "announce", its first line is "up PID": each run of a restarted task
// says so):
//
//	tcp PORT        listens on 127.0.0.1:PORT, or on PORT when it is
//	                HOST:PORT (accepting and closing); env:NAME is the
//	                variable NAME's value
//	http PORT       serves HTTP on PORT (as tcp's), every path answered
//	                with the current status (200 at first)
//	status N        makes the HTTP status N
//	hits N          waits until the HTTP server has had N requests in all
//	                (answers "hits N")
//	close           closes its listeners
//	touch PATH      creates the file PATH
//	wait PATH       waits until the file PATH exists
//	id              answers its own view: see CheckID
//	exit N          exits N (no answer)
//
// Any other answer is "ok", or "err ..." when the step failed.
func CheckTask(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "check task: want CTL and OUT fifos")
		return 2
	}
	ctl, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	out, err := os.OpenFile(args[1], os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	answer := func(err error, text string) {
		if err != nil {
			text = "err " + err.Error()
		}
		fmt.Fprintln(out, text)
	}
	if len(args) > 2 && args[2] == "announce" {
		answer(nil, fmt.Sprintf("up %d", os.Getpid()))
	}
	var status atomic.Int64
	status.Store(200)
	var mu sync.Mutex
	hits := 0
	hit := sync.NewCond(&mu)
	var lns []net.Listener
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "tcp", "http":
			if v, ok := strings.CutPrefix(rest, "env:"); ok {
				rest = os.Getenv(v)
			}
			addr := rest
			if !strings.Contains(addr, ":") {
				addr = net.JoinHostPort("127.0.0.1", rest)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				answer(err, "")
				continue
			}
			lns = append(lns, ln)
			if verb == "tcp" {
				go func() {
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
			} else {
				go func() {
					_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
						w.WriteHeader(int(status.Load()))
						mu.Lock()
						hits++
						hit.Broadcast()
						mu.Unlock()
					}))
				}()
			}
			answer(nil, "ok")
		case "status":
			n, err := strconv.Atoi(rest)
			status.Store(int64(n))
			answer(err, "ok")
		case "hits":
			n, _ := strconv.Atoi(rest)
			mu.Lock()
			for hits < n {
				hit.Wait()
			}
			mu.Unlock()
			answer(nil, "hits "+rest)
		case "close":
			for _, ln := range lns {
				ln.Close()
			}
			lns = nil
			answer(nil, "ok")
		case "touch":
			answer(os.WriteFile(rest, nil, 0o644), "ok")
		case "wait":
			answer(waitFile(rest), "ok")
		case "id":
			answer(nil, CheckID())
		case "exit":
			n, _ := strconv.Atoi(rest)
			return n
		default:
			answer(fmt.Errorf("unknown line %q", sc.Text()), "")
		}
	}
	return 4
}

// CheckID is the calling process's view of its sandbox: "UID ROOT MNT PID"
// (its uid, the device and inode of its root directory, its mount and
// PID namespaces' links).
func CheckID() string {
	root := "-"
	if fi, err := os.Stat("/proc/self/root/"); err == nil {
		root = statID(fi)
	}
	mnt, _ := os.Readlink("/proc/self/ns/mnt")
	pid, _ := os.Readlink("/proc/self/ns/pid")
	return fmt.Sprintf("%d %s %s %s", os.Getuid(), root, mnt, pid)
}

// CheckProbe is an exec check's command: it writes its CheckID to
// args[1] (replacing what was there), then exits 0 when the file args[0]
// exists, 1 when it does not; with args[0] "-block" it blocks instead.
func CheckProbe(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "check probe: want READY and SEEN paths")
		return 2
	}
	tmp := args[1] + ".tmp"
	if err := os.WriteFile(tmp, []byte(CheckID()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if err := os.Rename(tmp, args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if args[0] == "-block" {
		select {} // a check that never answers: its timeout kills it
	}
	if _, err := os.Stat(args[0]); err != nil {
		return 1
	}
	return 0
}

func statID(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}

// waitFile waits, by inotify on its directory, until the file path exists
// (made there, or renamed into it).
func waitFile(path string) error {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(path), unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if _, err := unix.Read(fd, buf); err != nil && err != unix.EINTR {
			return err
		}
	}
}
