package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
)

// Probe connects to every endpoint of cfg at once (TCP, or the unix
// socket) and returns nil as soon as one accepts. When none does it says
// why at once rather than after a command's timeout: an error wrapping
// ErrRefused (and ErrUnavailable) when every endpoint refused the
// connection (nothing listens: etcd is down there), or wrapping
// ErrUnavailable and context.DeadlineExceeded when some did not answer
// before ctx ended (a timeout, said as one). The gRPC client would retry
// a refused connection until the command's deadline: a command probes
// first, so that a down etcd fails it in a round trip.
func Probe(ctx context.Context, cfg Config) error {
	eps, err := cfg.endpoints()
	if err != nil {
		return err
	}
	type answer struct {
		ep  string
		err error
	}
	ch := make(chan answer, len(eps))
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, ep := range eps {
		go func() {
			network, addr := dialAddr(ep, !cfg.TLS.IsZero())
			var d net.Dialer
			c, err := d.DialContext(pctx, network, addr)
			if err == nil {
				c.Close()
			}
			ch <- answer{ep, err}
		}()
	}
	var refused, other []string
	for range eps {
		a := <-ch
		switch {
		case a.err == nil:
			return nil
		case errors.Is(a.err, syscall.ECONNREFUSED) || errors.Is(a.err, syscall.ENOENT):
			refused = append(refused, a.ep)
		default:
			other = append(other, fmt.Sprintf("%s: %v", a.ep, a.err))
		}
	}
	if len(other) == 0 {
		return fmt.Errorf("%w: %w at %s: nothing listens there (is etcd running?)", ErrUnavailable, ErrRefused, strings.Join(refused, ", "))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: no endpoint answered in time (%s): %w", ErrUnavailable, strings.Join(other, "; "), context.DeadlineExceeded)
	}
	return fmt.Errorf("%w: no endpoint could be reached: %s", ErrUnavailable, strings.Join(other, "; "))
}

// dialAddr is the network and address an endpoint is reached at.
func dialAddr(ep string, secure bool) (network, addr string) {
	if !strings.Contains(ep, "://") {
		return "tcp", ep
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "tcp", ep
	}
	switch u.Scheme {
	case "unix", "unixs":
		p := u.Host + u.Path
		if p == "" {
			p = u.Opaque
		}
		return "unix", p
	}
	return "tcp", u.Host
}
