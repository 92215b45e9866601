//go:build linux

package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Stat is the part of /proc/PID/stat tether reads.
type Stat struct {
	State     byte // R, S, D, Z, X, ...
	PPID      int
	PGID      int
	SID       int
	StartTime uint64 // field 22: clock ticks since boot
}

// Dead reports a zombie or a process being torn down.
func (s Stat) Dead() bool { return s.State == 'Z' || s.State == 'X' || s.State == 'x' }

func path(pid int, file string) string { return "/proc/" + strconv.Itoa(pid) + "/" + file }

// readProc reads a /proc file whole into buf (grown if it fills), with no
// stat of it first (a /proc file says size 0): open, reads until one
// returns nothing, close. The error wraps the errno (ENOENT, ESRCH for a
// process that is gone).
func readProc(p string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	for errors.Is(err, unix.EINTR) {
		fd, err = unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, max(len(buf), 512))...)
		}
		m, err := unix.Read(fd, buf[n:])
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, &fs.PathError{Op: "read", Path: p, Err: err}
		case m == 0:
			return buf[:n], nil
		}
		n += m
	}
}

// ReadStat reads /proc/PID/stat. A missing process is an error matching
// both ErrGone and fs.ErrNotExist.
func ReadStat(pid int) (Stat, error) {
	var buf [512]byte
	b, err := readProc(path(pid, "stat"), buf[:])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return Stat{}, fmt.Errorf("%w: pid %d: %w", ErrGone, pid, fs.ErrNotExist)
		}
		return Stat{}, fmt.Errorf("read the stat of pid %d: %w", pid, err)
	}
	return ParseStat(b)
}

// ParseStat parses the text of /proc/PID/stat. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last ')'.
func ParseStat(b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, errors.New("malformed /proc stat")
	}
	// The fields from 3 (state) on, separated by spaces: field N is the
	// (N-3)th; 22 (starttime) is the last one read.
	var f [20][]byte
	rest := b[i+2:]
	for k := range f {
		rest = bytes.TrimLeft(rest, " \n")
		end := bytes.IndexAny(rest, " \n")
		if end < 0 {
			end = len(rest)
		}
		if end == 0 {
			return Stat{}, errors.New("short /proc stat")
		}
		f[k], rest = rest[:end], rest[end:]
	}
	if len(f[0]) != 1 {
		return Stat{}, errors.New("short /proc stat")
	}
	var s Stat
	s.State = f[0][0]
	var err error
	if s.PPID, err = atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("/proc stat ppid: %w", err)
	}
	if s.PGID, err = atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("/proc stat pgrp: %w", err)
	}
	if s.SID, err = atoi(f[3]); err != nil {
		return Stat{}, fmt.Errorf("/proc stat session: %w", err)
	}
	if s.StartTime, err = strconv.ParseUint(string(f[19]), 10, 64); err != nil {
		return Stat{}, fmt.Errorf("/proc stat starttime: %w", err)
	}
	return s, nil
}

// atoi is strconv.Atoi of a field (the conversion to string does not
// allocate).
func atoi(b []byte) (int, error) { return strconv.Atoi(string(b)) }

// StartTime returns field 22 of /proc/PID/stat: the process start time in
// clock ticks since boot. A missing process is an error matching ErrGone.
func StartTime(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	return s.StartTime, nil
}

// Live reports whether pid is a live process (it exists and is no
// zombie), and its start time.
func Live(pid int) (uint64, bool) {
	s, err := ReadStat(pid)
	if err != nil || s.Dead() {
		return 0, false
	}
	return s.StartTime, true
}

var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

// BootID returns /proc/sys/kernel/random/boot_id (read once).
func BootID() (string, error) { return bootID() }

// Cmdline returns the arguments of /proc/PID/cmdline; nil for a process
// that is gone (or exiting: its cmdline reads empty).
func Cmdline(pid int) ([]string, error) {
	var buf [512]byte
	b, err := readProc(path(pid, "cmdline"), buf[:])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return nil, nil
		}
		return nil, fmt.Errorf("read the cmdline of pid %d: %w", pid, err)
	}
	if len(b) == 0 {
		return nil, nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00"), nil
}

// CmdlineHas reports whether /proc/PID/cmdline has every one of args as a
// whole argument.
func CmdlineHas(pid int, args ...string) (bool, error) {
	var buf [512]byte
	b, err := readProc(path(pid, "cmdline"), buf[:])
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			return false, nil
		}
		return false, fmt.Errorf("read the cmdline of pid %d: %w", pid, err)
	}
	b = bytes.TrimSuffix(b, []byte{0})
	for _, want := range args {
		found := false
		for a := range bytes.SplitSeq(b, []byte{0}) {
			if len(b) > 0 && string(a) == want {
				found = true
				break
			}
		}
		if !found {
			return false, nil
		}
	}
	return true, nil
}

// Comm is /proc/PID/comm, the process's name ("" if it is gone).
func Comm(pid int) string {
	b, err := os.ReadFile(path(pid, "comm"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// CaughtSignals is the SigCgt mask of /proc/PID/status: bit sig-1 is set
// for each signal the process has a handler for.
func CaughtSignals(pid int) (uint64, error) {
	b, err := os.ReadFile(path(pid, "status"))
	if err != nil {
		return 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "SigCgt:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no SigCgt in /proc/%d/status", pid)
}

// Each calls fn for every process in /proc whose stat parses.
func Each(fn func(pid int, s Stat)) error {
	d, err := os.Open("/proc")
	if err != nil {
		return fmt.Errorf("open /proc: %w", err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("read /proc: %w", err)
	}
	for _, n := range names {
		if n == "" || n[0] < '0' || n[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		s, err := ReadStat(pid)
		if err != nil {
			continue // exited meanwhile
		}
		fn(pid, s)
	}
	return nil
}

// Children lists the children of process pid, from each of its threads'
// /proc/PID/task/TID/children (a child belongs to the thread that forked
// it). It fails where the kernel does not list children
// (CONFIG_PROC_CHILDREN) or pid is gone.
func Children(pid int) ([]int, error) {
	base := "/proc/" + strconv.Itoa(pid) + "/task/"
	if _, err := os.Stat(base + strconv.Itoa(pid) + "/children"); err != nil {
		return nil, fmt.Errorf("the children of pid %d cannot be listed: %w", pid, err)
	}
	tids, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("list the threads of pid %d: %w", pid, err)
	}
	out := []int{}
	for _, t := range tids {
		b, err := os.ReadFile(base + t.Name() + "/children")
		if err != nil {
			continue // the thread ended meanwhile
		}
		for f := range strings.FieldsSeq(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
