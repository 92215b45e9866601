package testproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// NotifyTask is a helper task that speaks the sd_notify protocol as its
// test tells it, line by line, on the fifo args[0] (opened read-write, so
// it never sees EOF), and answers each line with one line on the fifo
// args[1] (with args[2] == "announce", its first line is "up PID",
// written once it reads args[0]: each run of a restarted task says so):
//
//	env             answers "NOTIFY_SOCKET WATCHDOG_USEC WATCHDOG_PID PID"
//	                (each "-" when unset; PID is its own as it sees it)
//	send TEXT       sends TEXT (with "\n" for a newline) to NOTIFY_SOCKET
//	child TEXT      has a child process of its own send TEXT, then reaps it
//	ping N          sends WATCHDOG=1 N times, a quarter of WATCHDOG_USEC
//	                apart, then answers "pinged N"
//	flood D TEXT    sends TEXT (no barrier) as fast as the socket takes it
//	                for the duration D (a time.Duration), then answers
//	                "flooded N" (the datagrams sent)
//	exit N          exits N (no answer)
//
// Any other answer is "ok", or "err ..." when the step failed. It is the
// task, so the time ping spends is its own: the test waits on its answer.
// With args[0] == "send", it is the child of a child line: it sends
// args[1] and exits. CTL and OUT must be consecutive in the process's
// arguments (what follows them, a test's marker, is kept for the child).
func NotifyTask(args []string) int {
	if len(args) >= 2 && args[0] == "send" {
		if err := notifySend(args[1]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return 0
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "notify task: want CTL and OUT fifos")
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
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		verb, rest, _ := strings.Cut(sc.Text(), " ")
		switch verb {
		case "env":
			get := func(k string) string {
				if v, ok := os.LookupEnv(k); ok {
					return v
				}
				return "-"
			}
			answer(nil, fmt.Sprintf("%s %s %s %d", get("NOTIFY_SOCKET"), get("WATCHDOG_USEC"), get("WATCHDOG_PID"), os.Getpid()))
		case "send":
			answer(notifySend(rest), "ok")
		case "child":
			cmd := exec.Command(os.Args[0], childArgs(args, rest)...)
			cmd.Stderr = os.Stderr
			answer(cmd.Run(), "ok")
		case "ping":
			n, _ := strconv.Atoi(rest)
			usec, err := strconv.ParseInt(os.Getenv("WATCHDOG_USEC"), 10, 64)
			if err != nil {
				answer(fmt.Errorf("WATCHDOG_USEC: %w", err), "")
				continue
			}
			every := time.Duration(usec) * time.Microsecond / 4
			tick := time.NewTicker(every)
			for i := 0; i < n && err == nil; i++ {
				err = notifySend("WATCHDOG=1")
				if i < n-1 {
					<-tick.C
				}
			}
			tick.Stop()
			answer(err, "pinged "+rest)
		case "flood":
			d, text, _ := strings.Cut(rest, " ")
			dur, err := time.ParseDuration(d)
			if err != nil {
				answer(err, "")
				continue
			}
			n, err := notifyFlood(dur, text)
			answer(err, fmt.Sprintf("flooded %d", n))
		case "exit":
			n, _ := strconv.Atoi(rest)
			return n
		default:
			answer(fmt.Errorf("unknown line %q", sc.Text()), "")
		}
	}
	return 4
}

// childArgs is this process's arguments with CTL OUT (args) replaced by
// "send" and text: the same helper mode, as a child that sends text.
func childArgs(args []string, text string) []string {
	all := os.Args[1:]
	for i := 0; i+1 < len(all); i++ {
		if all[i] == args[0] && all[i+1] == args[1] {
			return slices.Concat(all[:i], []string{"send", text}, all[i+2:])
		}
	}
	return []string{"send", text}
}

// notifySend sends one datagram to NOTIFY_SOCKET, "\n" in text a newline,
// then waits on a barrier (BARRIER=1 with a pipe's write end, as
// sd_notify_barrier does) until the receiver has handled it.
func notifySend(text string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return fmt.Errorf("no NOTIFY_SOCKET")
	}
	addr := &unix.SockaddrUnix{Name: path}
	if strings.HasPrefix(path, "@") {
		addr.Name = "\x00" + path[1:]
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Sendmsg(fd, []byte(strings.ReplaceAll(text, `\n`, "\n")), nil, addr, 0); err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	err = unix.Sendmsg(fd, []byte("BARRIER=1"), unix.UnixRights(int(w.Fd())), addr, 0)
	w.Close()
	if err != nil {
		return err
	}
	if err := r.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return err
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		return fmt.Errorf("the barrier: %v (want the receiver to close it)", err)
	}
	return nil
}

// notifyFlood sends text to NOTIFY_SOCKET in a loop for dur, each send
// blocking while the receiver's queue is full, and returns how many it
// sent.
func notifyFlood(dur time.Duration, text string) (int, error) {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return 0, fmt.Errorf("no NOTIFY_SOCKET")
	}
	addr := &unix.SockaddrUnix{Name: path}
	if strings.HasPrefix(path, "@") {
		addr.Name = "\x00" + path[1:]
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// A send blocks at most this long, so that the loop sees its end.
	tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv); err != nil {
		return 0, err
	}
	msg := []byte(strings.ReplaceAll(text, `\n`, "\n"))
	n := 0
	for end := time.Now().Add(dur); time.Now().Before(end); {
		err := unix.Sendmsg(fd, msg, nil, addr, 0)
		switch {
		case err == nil:
			n++
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		default:
			return n, err
		}
	}
	return n, nil
}

// Notify sends text to the notify socket at path from the calling
// process (a stranger to the task: a test's own sends).
func Notify(path, text string) error {
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(text))
	return err
}
