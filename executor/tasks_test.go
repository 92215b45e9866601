//go:build linux

package executor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/internal/testproc"
)

// runMoreTask holds the task modes of the containment, isolation and
// output tests:
//
//	alloc MB            map and touch MB megabytes, print "survived"
//	forker N [FIFO]     fork N children that block (raw clone), print "ok failed errno" (to FIFO too), block
//	oomadj              print /proc/self/oom_score_adj
//	inspect PATH...     print an inspectReport (PATHs: is each readable?)
//	hostile JSON        try what hostileTargets lists, print a hostileReport
//	print BYTES         print BYTES of numbered lines to stdout, then exit 0
//	escape-wait FIFO    start a setsid'd, double-forked sleeper (its pid to FIFO), then exit 0
//	notify CTL OUT      speak sd_notify as told on CTL (testproc.NotifyTask)
//	check CTL OUT       listen, serve, touch as told on CTL (testproc.CheckTask)
//	probe READY SEEN    an exec check's command (testproc.CheckProbe)
func runMoreTask(args []string) int {
	switch args[0] {
	case "notify":
		return testproc.NotifyTask(args[1:])
	case "check":
		return testproc.CheckTask(args[1:])
	case "probe":
		return testproc.CheckProbe(args[1:])
	case "alloc":
		mb, _ := strconv.Atoi(args[1])
		mem, err := unix.Mmap(-1, 0, mb<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		fmt.Println("survived")
		return 0
	case "forker":
		n, _ := strconv.Atoi(args[1])
		var report *os.File
		if len(args) > 2 {
			var err error
			if report, err = os.OpenFile(args[2], os.O_WRONLY, 0); err != nil {
				return 2
			}
		}
		ok, failed := 0, 0
		var last syscall.Errno
		for range n {
			if errno := rawForkBlock(); errno != 0 {
				failed++
				last = errno
			} else {
				ok++
			}
		}
		fmt.Printf("%d %d %d\n", ok, failed, int(last))
		if report != nil {
			fmt.Fprintf(report, "%d %d %d\n", ok, failed, int(last))
		}
		block()
	case "usr1", "usr1-kid":
		return usr1Task(args[0], args[1])
	case "oomadj":
		b, err := os.ReadFile("/proc/self/oom_score_adj")
		if err != nil {
			return 2
		}
		fmt.Print(string(b))
		return 0
	case "inspect":
		b, _ := json.Marshal(inspect(args[1:]))
		fmt.Println(string(b))
		return 0
	case "hostile":
		var tg hostileTargets
		if err := json.Unmarshal([]byte(args[1]), &tg); err != nil {
			return 2
		}
		b, _ := json.Marshal(hostile(tg))
		fmt.Println(string(b))
		return 0
	case "print":
		n, _ := strconv.Atoi(args[1])
		w := bufio.NewWriterSize(os.Stdout, 64<<10)
		for i, written := 0, 0; written < n; i++ {
			k, _ := fmt.Fprintf(w, "line %09d %s\n", i, strings.Repeat("x", 50))
			written += k
		}
		if err := w.Flush(); err != nil {
			return 3
		}
		return 0
	case "escape-wait":
		// A child in a session of its own forks the sleeper and exits:
		// the sleeper is an orphan outside the task's session and group.
		c := exec.Command(os.Args[0], "task", os.Args[2], "escape-child", args[1])
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := c.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "escape-child:", err)
			return 2
		}
		return 0
	case "escape-child":
		pid, errno := rawFork()
		if errno != 0 {
			return 3
		}
		if pid == 0 {
			for {
				syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
			}
		}
		f, err := os.OpenFile(args[1], os.O_WRONLY, 0)
		if err != nil {
			return 4
		}
		fmt.Fprintln(f, pid)
		f.Close()
		return 0
	}
	return runSandboxTask(args)
}

// rawFork forks without the Go runtime's help: the child may only make raw
// syscalls.
func rawFork() (int, syscall.Errno) {
	r, _, e := syscall.RawSyscall(syscall.SYS_CLONE, uintptr(syscall.SIGCHLD), 0, 0)
	return int(r), e
}

// rawForkBlock forks a child that blocks forever in ppoll.
func rawForkBlock() syscall.Errno {
	pid, e := rawFork()
	if e != 0 {
		return e
	}
	if pid == 0 {
		for {
			syscall.RawSyscall6(syscall.SYS_PPOLL, 0, 0, 0, 0, 0, 0)
		}
	}
	return 0
}

// inspectReport is what a task sees from the inside.
type inspectReport struct {
	UID, GID   int
	Cwd        string
	Self       int
	PIDs       []int
	CapEff     uint64
	CapBnd     uint64
	CapPrm     uint64
	CapInh     uint64
	CapAmb     uint64
	NoNewPrivs string
	Seccomp    string
	Cgroups    []string // the lines of /proc/self/cgroup
	Env        map[string]string
	Readable   map[string]string // path: "" if it could be read, else the error
	MountInfo  []string          // mount points
}

func inspect(paths []string) inspectReport {
	r := inspectReport{UID: os.Getuid(), GID: os.Getgid(), Self: os.Getpid(), Env: map[string]string{}, Readable: map[string]string{}}
	r.Cwd, _ = os.Getwd()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			r.PIDs = append(r.PIDs, pid)
		}
	}
	b, _ := os.ReadFile("/proc/self/status")
	for l := range strings.SplitSeq(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "CapEff":
			r.CapEff, _ = strconv.ParseUint(v, 16, 64)
		case "CapBnd":
			r.CapBnd, _ = strconv.ParseUint(v, 16, 64)
		case "CapPrm":
			r.CapPrm, _ = strconv.ParseUint(v, 16, 64)
		case "CapInh":
			r.CapInh, _ = strconv.ParseUint(v, 16, 64)
		case "CapAmb":
			r.CapAmb, _ = strconv.ParseUint(v, 16, 64)
		case "NoNewPrivs":
			r.NoNewPrivs = v
		case "Seccomp":
			r.Seccomp = v
		}
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		r.Env[k] = v
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	for l := range strings.SplitSeq(strings.TrimSpace(string(cg)), "\n") {
		if l != "" {
			r.Cgroups = append(r.Cgroups, l)
		}
	}
	for _, p := range paths {
		var err error
		if fi, serr := os.Stat(p); serr == nil && fi.IsDir() {
			var ents []os.DirEntry
			ents, err = os.ReadDir(p)
			if err == nil && len(ents) > 0 {
				err = nil
			} else if err == nil {
				err = errors.New("empty directory")
			}
		} else {
			_, err = os.ReadFile(p)
			if err == nil {
				if b, _ := os.ReadFile(p); len(b) == 0 {
					err = errors.New("empty file")
				}
			}
		}
		if err != nil {
			r.Readable[p] = err.Error()
		} else {
			r.Readable[p] = ""
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for l := range strings.SplitSeq(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 {
			r.MountInfo = append(r.MountInfo, f[4])
		}
	}
	return r
}

// hostileTargets are what a hostile task tries to reach, as host paths
// and pids.
type hostileTargets struct {
	Store       string // the store (the state directory's tether.db)
	OtherTask   string // another task's directory
	SideFile    string // its own executor's identity file
	Socket      string // its own executor's control socket
	ExecutorPID int
}

// hostileReport has, for each attempt, "" if it worked or the error.
type hostileReport map[string]string

func hostile(tg hostileTargets) hostileReport {
	fds, fdErr := inheritedFDs()
	r := hostileReport{}
	note := func(what string, err error) {
		if err == nil {
			r[what] = ""
		} else {
			r[what] = err.Error()
		}
	}
	_, err := os.ReadFile(tg.Store)
	note("read the store", err)
	f, err := os.OpenFile(tg.Store, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write([]byte("x"))
		f.Close()
	}
	note("write the store", err)
	_, err = os.ReadDir(tg.OtherTask)
	note("list another task's directory", err)
	note("write into another task's directory", os.WriteFile(filepath.Join(tg.OtherTask, "planted"), []byte("x"), 0o644))
	note("overwrite its executor's identity file", os.WriteFile(tg.SideFile, []byte("{}"), 0o644))
	c, err := net.Dial("unix", tg.Socket)
	if err == nil {
		c.Close()
	}
	note("connect to its executor's socket", err)
	note("SIGKILL its executor", syscall.Kill(tg.ExecutorPID, syscall.SIGKILL))
	note("mount a tmpfs", unix.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))
	// A device node (the host's disk) made in its own writable directory.
	dev := "/local/hostile-dev"
	err = unix.Mknod(dev, unix.S_IFBLK|0o600, int(unix.Mkdev(8, 0)))
	if err == nil || errors.Is(err, unix.EEXIST) {
		var fd int
		fd, err = unix.Open(dev, unix.O_RDONLY, 0)
		if err == nil {
			unix.Close(fd)
		}
	}
	note("open a block device it made", err)
	note("write /proc/sysrq-trigger", os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0))
	note("write /proc/sys/kernel/hostname", os.WriteFile("/proc/sys/kernel/hostname", []byte("hostile"), 0))
	b, err := os.ReadFile("/etc/shadow")
	if err == nil && len(b) == 0 {
		err = errors.New("read it empty (masked)")
	}
	note("read /etc/shadow", err)
	note("write /etc/passwd", os.WriteFile("/etc/passwd", []byte("x"), 0o644))
	note("create a file in /", os.WriteFile("/hostile", []byte("x"), 0o644))
	// Through a descriptor it did not open (the test leaves one on the
	// host's / without close-on-exec when it spawns the executor), listed
	// before anything here opened one of its own.
	err = fdErr
	if err == nil && len(fds) == 0 {
		err = errors.New("it holds no descriptor but stdio")
	}
	note("hold a descriptor it did not open", err)
	err = errors.New("no inherited descriptor leads to it")
	for _, fd := range fds {
		if _, rerr := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d%s", fd, tg.Store)); rerr == nil {
			err = nil
		}
	}
	note("read the store through an inherited descriptor", err)
	return r
}

// inheritedFDs lists this process's descriptors beyond stdio that it
// inherited: those without close-on-exec (everything a Go program opens
// itself, the runtime's cgroup files and poller included, has it).
func inheritedFDs() ([]int, error) {
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // the directory's own descriptor, closed by now
		}
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				if flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64); err == nil && flags&unix.O_CLOEXEC == 0 {
					out = append(out, fd)
				}
			}
		}
	}
	return out, nil
}

// hostileOK lists the attempts of a hostile report that worked.
func (r hostileReport) worked() []string {
	var out []string
	for k, v := range r {
		if v == "" {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
