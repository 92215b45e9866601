// Command minhelper is the floor the executor is measured against: a minimal
// Go helper that listens on a unix socket, reports ready on descriptor 3 and
// answers net/rpc (gob) calls. Only the benchmarks build it.
package main

import (
	"net"
	"net/rpc"
	"os"
)

// Helper is the RPC receiver.
type Helper struct{}

// Ping answers one call.
func (Helper) Ping(in int, out *int) error {
	*out = in + 1
	return nil
}

func main() {
	if len(os.Args) != 2 {
		os.Exit(2)
	}
	ln, err := net.Listen("unix", os.Args[1])
	if err != nil {
		os.Exit(1)
	}
	srv := rpc.NewServer()
	if err := srv.Register(Helper{}); err != nil {
		os.Exit(1)
	}
	ready := os.NewFile(3, "ready")
	ready.Write([]byte("ok"))
	ready.Close()
	srv.Accept(ln)
}
