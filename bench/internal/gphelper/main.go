// Command gphelper is the go-plugin executor the benchmarks compare tether
// with: it writes its identity file durably (as tether's executor does),
// then serves the gpexec plugin over gRPC; Launch fork/execs the task in
// its own process group and reaps it. Only the benchmarks build it.
//
//	gphelper DIR              # the task runs uncontained
//	gphelper DIR TASK NONCE   # Launch also creates the task's cgroup (tether's
//	                          # location and layout for TASK and NONCE, no
//	                          # limits) and moves the task into it, as Nomad's
//	                          # executor does with libcontainer's cgroup manager
package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/hashicorp/go-plugin"

	"github.com/tether-fsm/tether/bench/internal/gpexec"
	"github.com/tether-fsm/tether/cgroup"
)

// executor launches tasks; with task and nonce set, each in a cgroup.
type executor struct{ task, nonce string }

func (e executor) Launch(_ context.Context, command string, args []string) (int, error) {
	var cg *cgroup.Cgroup
	if e.task != "" {
		h, err := cgroup.Probe()
		if err != nil {
			return 0, err
		}
		loc, err := cgroup.LocationFor(h, e.task, e.nonce)
		if err != nil {
			return 0, err
		}
		if cg, err = cgroup.Create(h, loc, cgroup.Limits{}); err != nil {
			return 0, err
		}
	}
	cmd := exec.Command(command, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go cmd.Wait()
	if cg != nil {
		if err := cg.Add(cmd.Process.Pid); err != nil {
			_ = cmd.Process.Kill()
			return 0, err
		}
	}
	return cmd.Process.Pid, nil
}

// writeIdentity writes pid and dir to dir/identity.json: temporary file,
// fsync, rename, fsync of the directory.
func writeIdentity(dir string) error {
	b, _ := json.Marshal(map[string]any{"pid": os.Getpid(), "dir": dir})
	tmp := filepath.Join(dir, ".identity.tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	f.Close()
	if err := os.Rename(tmp, filepath.Join(dir, "identity.json")); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func main() {
	var e executor
	if len(os.Args) >= 2 {
		if err := writeIdentity(os.Args[1]); err != nil {
			os.Exit(1)
		}
	}
	if len(os.Args) == 4 {
		e = executor{task: os.Args[2], nonce: os.Args[3]}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: gpexec.Handshake,
		Plugins:         map[string]plugin.Plugin{gpexec.Name: &gpexec.Plugin{Impl: e}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
