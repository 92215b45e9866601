// Command gphelper is the go-plugin executor the benchmarks compare tether
// with: it writes its identity file durably (as tether's executor does),
// then serves the gpexec plugin over gRPC; Launch fork/execs the task in
// its own process group and reaps it. Only the benchmarks build it.
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
)

type executor struct{}

func (executor) Launch(_ context.Context, command string, args []string) (int, error) {
	cmd := exec.Command(command, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	go cmd.Wait()
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
	if len(os.Args) == 2 {
		if err := writeIdentity(os.Args[1]); err != nil {
			os.Exit(1)
		}
	}
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: gpexec.Handshake,
		Plugins:         map[string]plugin.Plugin{gpexec.Name: &gpexec.Plugin{Impl: executor{}}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}
