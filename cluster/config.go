package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// TLS names the files of a client's mutual TLS with etcd: the CA that
// signed the members' certificates, and this client's certificate and
// key. All three, or none.
type TLS struct {
	CA   string
	Cert string
	Key  string
	// ServerName overrides the name checked in the members' certificates
	// (default: the endpoint's host).
	ServerName string
}

// IsZero reports whether no file is named.
func (t TLS) IsZero() bool { return t.CA == "" && t.Cert == "" && t.Key == "" }

// Config is how to reach a fleet's etcd.
type Config struct {
	// Endpoints are the members' client URLs: http://HOST:PORT,
	// https://HOST:PORT, HOST:PORT (https when TLS is given), or
	// unix://PATH.
	Endpoints []string
	// TLS is required for any endpoint that is not on the loopback
	// (127.0.0.0/8, ::1, localhost) or a unix socket: whoever can write
	// to etcd tells nodes what to run, so the connection is authenticated
	// both ways.
	TLS TLS
	// DialTimeout bounds the first connection (default 5s). Operations
	// have their own deadlines from their contexts.
	DialTimeout time.Duration
}

// endpoints checks the endpoints against the trust rule and returns them
// in the form the client takes.
func (c Config) endpoints() ([]string, error) {
	if len(c.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: none given: name the members' client URLs, such as http://127.0.0.1:2379", ErrEndpoint)
	}
	secure := !c.TLS.IsZero()
	out := make([]string, 0, len(c.Endpoints))
	for _, ep := range c.Endpoints {
		ep = strings.TrimSpace(ep)
		host, scheme, err := splitEndpoint(ep)
		if err != nil {
			return nil, err
		}
		switch {
		case scheme == "unix":
		case scheme == "http" && secure:
			return nil, fmt.Errorf("%w %q: TLS files are given but the URL says http: use https://", ErrEndpoint, ep)
		case scheme == "https" && !secure:
			return nil, fmt.Errorf("%w: %q is https but no client certificate is given: pass the CA, certificate and key (--cluster-tls-ca, --cluster-tls-cert, --cluster-tls-key)", ErrInsecure, ep)
		case !secure && !loopback(host):
			return nil, fmt.Errorf("%w: %q is not on this machine's loopback, and plaintext would let anyone on the path tell this node what to run: "+
				"use https:// with a CA, client certificate and key (--cluster-tls-ca, --cluster-tls-cert, --cluster-tls-key)", ErrInsecure, ep)
		}
		out = append(out, ep)
	}
	return out, nil
}

// splitEndpoint returns an endpoint's host and scheme ("http" for a bare
// HOST:PORT without TLS).
func splitEndpoint(ep string) (host, scheme string, err error) {
	if !strings.Contains(ep, "://") {
		h, _, err := net.SplitHostPort(ep)
		if err != nil {
			return "", "", fmt.Errorf("%w %q: %w: use http://HOST:PORT or https://HOST:PORT", ErrEndpoint, ep, err)
		}
		return h, "", nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", "", fmt.Errorf("%w %q: %w", ErrEndpoint, ep, err)
	}
	switch u.Scheme {
	case "http", "https":
		if u.Hostname() == "" || u.Port() == "" {
			return "", "", fmt.Errorf("%w %q: want %s://HOST:PORT", ErrEndpoint, ep, u.Scheme)
		}
		return u.Hostname(), u.Scheme, nil
	case "unix", "unixs":
		return "", "unix", nil
	}
	return "", "", fmt.Errorf("%w %q: scheme %q: use http, https or unix", ErrEndpoint, ep, u.Scheme)
}

// loopback reports whether host is this machine's loopback. Names other
// than localhost are not resolved: a name is only as safe as its resolver.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tlsConfig loads the files of c.TLS, or returns nil when none is named.
func (c Config) tlsConfig() (*tls.Config, error) {
	t := c.TLS
	if t.IsZero() {
		return nil, nil
	}
	if t.CA == "" || t.Cert == "" || t.Key == "" {
		return nil, fmt.Errorf("%w: give all three of the CA, the client certificate and its key (got CA %q, certificate %q, key %q)",
			ErrTLSConfig, t.CA, t.Cert, t.Key)
	}
	if err := privateFile(t.Key); err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("%w: CA: %w", ErrTLSConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA %s holds no PEM certificate", ErrTLSConfig, t.CA)
	}
	cert, err := tls.LoadX509KeyPair(t.Cert, t.Key)
	if err != nil {
		return nil, fmt.Errorf("%w: client certificate %s and key %s: %w", ErrTLSConfig, t.Cert, t.Key, err)
	}
	return &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{cert},
		ServerName:   t.ServerName,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// privateFile refuses a key that others than its owner can read, as ssh
// does: a key readable by the node's other users lets them speak for it.
func privateFile(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: key: %w", ErrTLSConfig, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%w: key %s is readable by others (mode %04o): chmod 600 it", ErrTLSConfig, path, st.Mode().Perm())
	}
	return nil
}

// Dial checks cfg against the trust rule and returns a client. It does
// not wait for etcd to answer: a node that boots while etcd is down gets
// a client at once, and every operation says ErrUnavailable until etcd is
// back.
func Dial(cfg Config) (*clientv3.Client, error) {
	eps, err := cfg.endpoints()
	if err != nil {
		return nil, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            eps,
		TLS:                  tc,
		DialTimeout:          cfg.DialTimeout,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		// The client logs through zap; tether logs what it makes of the
		// client's errors through its own logger.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return cli, nil
}
