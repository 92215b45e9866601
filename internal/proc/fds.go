//go:build linux

package proc

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CloseInheritedOnExec marks every descriptor from 3 up close-on-exec.
//
// Go opens everything close-on-exec, but a process keeps the descriptors
// it inherited as they came: a shell's `exec 7</` or an agent's open file
// without the flag passes from the CLI to the executor, from the executor
// to the init shim and from there to the task, where a task confined to a
// root of its own could reach the host's files through /proc/self/fd/7.
// The executor's entry point calls it first, in every mode (executor, init
// shim, join shim), so nothing an executor inherited reaches a task or a
// `tether exec` command; the CLI calls it first too, so its executors
// inherit nothing but what they are given. Descriptors the process uses go
// on working; they are only not passed on. A process that means to hand a
// descriptor to a child passes it explicitly (os/exec's ExtraFiles, which
// clears the flag in the child).
func CloseInheritedOnExec() error {
	err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC)
	if err == nil || !(errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		return err
	}
	// Before Linux 5.11: one by one, from the process's descriptor table.
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list the inherited descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	dirFD := int(d.Fd())
	if err != nil {
		d.Close()
		return fmt.Errorf("list the inherited descriptors: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < 3 || fd == dirFD {
			continue
		}
		unix.CloseOnExec(fd)
	}
	return d.Close()
}
