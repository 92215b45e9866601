package taskfile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/tether-fsm/tether/fsm"
)

// Port is an allocated port (fsm.Port: the spec records it).
type Port = fsm.Port

// Nomad's default dynamic port range.
const (
	DefaultMinDynamicPort = 20000
	DefaultMaxDynamicPort = 32000
)

// Allocator gives ports on this host so that two tasks never hold the
// same one while both run, across processes: every allocation and
// release runs under an exclusive flock of PortsLock in Dir and reads and
// rewrites the registry PortsFile there (written to a temporary file,
// fsynced, renamed), so two tether processes allocating at once are
// serialised and each sees what the other holds. A port held in the
// registry is never given again until its owner releases it or Live says
// the owner is gone; a port some other program holds is skipped because
// the allocator binds it (TCP and UDP on IP) before giving it.
type Allocator struct {
	// Dir is the state directory the lock and the registry live in.
	Dir string
	// IP is the address ports are given on and checked against.
	IP string
	// Min and Max bound dynamic ports (0: Nomad's 20000 to 32000).
	Min, Max int
	// Live reports whether an owner in the registry still runs; nil keeps
	// every entry until Release.
	Live func(owner string) bool
}

// The allocator's files in Dir.
const (
	PortsLock = "ports.lock"
	PortsFile = "ports.json"
)

type registry struct {
	Owners map[string][]Port `json:"owners"`
}

// Allocate gives owner (a task or alloc id) a port for each request:
// static ones as asked, dynamic ones chosen at random in [Min, Max]. A
// static port another owner holds, or that cannot be bound, is an
// ErrPorts naming it. Allocating again for an owner replaces what it held.
func (a *Allocator) Allocate(ctx context.Context, owner string, reqs []PortRequest) ([]Port, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: no owner", ErrPorts)
	}
	var out []Port
	err := a.locked(func(reg *registry) error {
		delete(reg.Owners, owner)
		used := map[int]string{}
		for o, ps := range reg.Owners {
			for _, p := range ps {
				used[p.Value] = o
			}
		}
		lo, hi := a.Min, a.Max
		if lo <= 0 {
			lo = DefaultMinDynamicPort
		}
		if hi <= 0 {
			hi = DefaultMaxDynamicPort
		}
		if hi < lo {
			return fmt.Errorf("%w: dynamic range %d-%d is empty", ErrPorts, lo, hi)
		}
		for _, r := range reqs {
			if r.Static > 0 {
				if o, held := used[r.Static]; held {
					return fmt.Errorf("%w: static port %d (%q) is held by %s", ErrPorts, r.Static, r.Label, o)
				}
				if err := a.bindable(r.Static); err != nil {
					return fmt.Errorf("%w: static port %d (%q) is in use on %s: %w", ErrPorts, r.Static, r.Label, a.IP, err)
				}
				used[r.Static] = owner
				out = append(out, Port{Label: r.Label, Value: r.Static, To: r.To, IP: a.IP, Task: r.Task})
			}
		}
		for _, r := range reqs {
			if r.Static > 0 {
				continue
			}
			got := 0
			for try := 0; try < 100 && got == 0; try++ {
				if err := ctx.Err(); err != nil {
					return err
				}
				c := lo + rand.IntN(hi-lo+1)
				if _, held := used[c]; held || a.bindable(c) != nil {
					continue
				}
				got = c
			}
			if got == 0 {
				return fmt.Errorf("%w: no free dynamic port for %q in %d-%d after 100 tries", ErrPorts, r.Label, lo, hi)
			}
			used[got] = owner
			out = append(out, Port{Label: r.Label, Value: got, To: r.To, IP: a.IP, Task: r.Task})
		}
		if len(out) > 0 {
			reg.Owners[owner] = out
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Release frees what owner holds.
func (a *Allocator) Release(owner string) error {
	return a.locked(func(reg *registry) error {
		delete(reg.Owners, owner)
		return nil
	})
}

// Held returns what every owner holds (for status).
func (a *Allocator) Held() (map[string][]Port, error) {
	var out map[string][]Port
	err := a.locked(func(reg *registry) error {
		out = reg.Owners
		return nil
	})
	return out, err
}

// bindable checks that port can be bound on IP for TCP and UDP now.
func (a *Allocator) bindable(port int) error {
	addr := net.JoinHostPort(a.IP, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return err
	}
	return u.Close()
}

// locked runs fn on the registry under the lock, pruning owners Live
// says are gone, and writes the registry back.
func (a *Allocator) locked(fn func(*registry) error) error {
	if a.Dir == "" || a.IP == "" {
		return fmt.Errorf("%w: the allocator needs Dir and IP", ErrPorts)
	}
	lf, err := os.OpenFile(filepath.Join(a.Dir, PortsLock), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	defer lf.Close()
	for {
		err = unix.Flock(int(lf.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%w: lock %s: %w", ErrPorts, lf.Name(), err)
	}
	defer unix.Flock(int(lf.Fd()), unix.LOCK_UN)
	path := filepath.Join(a.Dir, PortsFile)
	reg := &registry{Owners: map[string][]Port{}}
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, reg); err != nil {
			return fmt.Errorf("%w: %s is corrupt (%v): remove it when no task of this state directory runs", ErrPorts, path, err)
		}
		if reg.Owners == nil {
			reg.Owners = map[string][]Port{}
		}
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	before, _ := json.Marshal(reg)
	if a.Live != nil {
		for _, o := range slices.Sorted(maps.Keys(reg.Owners)) {
			if !a.Live(o) {
				delete(reg.Owners, o)
			}
		}
	}
	if err := fn(reg); err != nil {
		return err
	}
	after, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	if string(after) == string(before) {
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	if _, err := f.Write(after); err != nil {
		f.Close()
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	f.Close()
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %w", ErrPorts, err)
	}
	d, err := os.Open(a.Dir)
	if err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
