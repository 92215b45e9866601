//go:build linux

package server

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/fsm"
)

// answering serves each connection on 127.0.0.1 with answer (after
// reading the request's head), or holds it open unanswered when answer is
// "", and returns the address and the request heads it read.
func answering(t *testing.T, answer string) (string, <-chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	heads := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				var head strings.Builder
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					head.WriteString(l)
					if l == "\r\n" {
						break
					}
				}
				heads <- head.String()
				if answer == "" {
					_, _ = r.ReadByte() // until the client gives up
					return
				}
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return ln.Addr().String(), heads
}

// The http check's GET: the path and host sent, the status line's code
// read (a redirect is its own code, not followed), anything else than an
// HTTP status line an error, an answer that never comes an error once the
// try's context ends.
func TestHTTPGet_Status(t *testing.T) {
	for name, tc := range map[string]struct {
		answer string
		code   int
		err    string
	}{
		"200":       {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 200, ""},
		"503":       {"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy", 503, ""},
		"redirect":  {"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\n\r\n", 302, ""},
		"no reason": {"HTTP/1.1 204\r\n\r\n", 204, ""},
		"garbage":   {"SSH-2.0-OpenSSH\r\n", 0, "not an HTTP answer"},
		"bad code":  {"HTTP/1.1 20x OK\r\n\r\n", 0, "not an HTTP status line"},
		"closed":    {"HTTP/1.1 20", 0, "reading the answer's status line"},
	} {
		t.Run(name, func(t *testing.T) {
			addr, heads := answering(t, tc.answer)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			code, err := httpGet(ctx, addr, "/health?x=1")
			if code != tc.code || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("httpGet = %d, %v; want %d, %q", code, err, tc.code, tc.err)
			}
			head := <-heads
			if !strings.HasPrefix(head, "GET /health?x=1 HTTP/1.1\r\n") || !strings.Contains(head, "\r\nHost: "+addr+"\r\n") {
				t.Errorf("request head %q", head)
			}
		})
	}
	t.Run("no answer", func(t *testing.T) {
		addr, _ := answering(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if code, err := httpGet(ctx, addr, "/"); err == nil {
			t.Fatalf("httpGet = %d, nil; want the try's timeout", code)
		}
	})
}

// probe reads a 429 as a warning (a failure that ignore_warnings lets
// pass for restarts), a 2xx as a pass, a 500 as a failure.
func TestProbe_HTTPClasses(t *testing.T) {
	for answer, want := range map[string]checkResult{
		"HTTP/1.1 200 OK\r\n\r\n":                {ok: true},
		"HTTP/1.1 429 Too Many Requests\r\n\r\n": {warn: true, why: "HTTP 429"},
		"HTTP/1.1 500 Oops\r\n\r\n":              {why: "HTTP 500"},
	} {
		addr, _ := answering(t, answer)
		host, port, _ := net.SplitHostPort(addr)
		var c fsm.Check
		c.Address, c.Path = host, "/"
		if c.Port, _ = strconv.Atoi(port); c.Port == 0 {
			t.Fatal(addr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got := probe(ctx, fsm.ReadinessHTTP, c)
		cancel()
		if got != want {
			t.Errorf("%q: %+v, want %+v", answer, got, want)
		}
	}
}

// TestChecker_CountsConsecutiveFailuresPastTheGrace: check_restart's
// limit is of consecutive failures: a pass resets the count; a failure
// within the grace counts nothing (at the grace it counts); the run is
// restarted at the limit-th, not before; a warning (HTTP 429) counts as a
// failure unless ignore_warnings, which makes it a pass; no check_restart,
// or a limit of 0, never restarts.
func TestChecker_CountsConsecutiveFailuresPastTheGrace(t *testing.T) {
	pass, fail, warn := checkResult{ok: true}, checkResult{why: "HTTP 503"}, checkResult{warn: true, why: "HTTP 429"}
	const grace = 10 * time.Second
	type try struct {
		r  checkResult
		at time.Duration
	}
	after := grace + time.Second
	for _, tc := range []struct {
		name  string
		cr    *fsm.CheckRestart
		tries []try
		want  int // the try (from 1) that restarts the run; 0: none
	}{
		{"the limit-th consecutive failure", &fsm.CheckRestart{Limit: 3, Grace: grace}, []try{{fail, after}, {fail, after}, {fail, after}, {fail, after}}, 3},
		{"one short of the limit", &fsm.CheckRestart{Limit: 3, Grace: grace}, []try{{fail, after}, {fail, after}}, 0},
		{"a pass between resets", &fsm.CheckRestart{Limit: 2, Grace: grace}, []try{{fail, after}, {pass, after}, {fail, after}, {pass, after}, {fail, after}, {fail, after}}, 6},
		{"failures within the grace count nothing", &fsm.CheckRestart{Limit: 2, Grace: grace}, []try{{fail, grace - time.Millisecond}, {fail, grace - time.Millisecond}, {fail, grace}, {fail, grace}}, 4},
		{"a warning is a failure", &fsm.CheckRestart{Limit: 2, Grace: grace}, []try{{warn, after}, {warn, after}}, 2},
		{"ignore_warnings: a warning is a pass", &fsm.CheckRestart{Limit: 2, Grace: grace, IgnoreWarnings: true}, []try{{fail, after}, {warn, after}, {fail, after}, {warn, after}, {fail, after}, {fail, after}}, 6},
		{"limit 0 never restarts", &fsm.CheckRestart{Limit: 0, Grace: grace}, []try{{fail, after}, {fail, after}, {fail, after}}, 0},
		{"no check_restart never restarts", nil, []try{{fail, after}, {fail, after}, {fail, after}}, 0},
		{"limit 1", &fsm.CheckRestart{Limit: 1}, []try{{pass, 0}, {fail, 0}}, 2},
	} {
		ck := &checker{c: &fsm.Check{Restart: tc.cr}}
		got := 0
		for i, tr := range tc.tries {
			if ck.count(tr.r, tr.at) {
				got = i + 1
				break
			}
		}
		if got != tc.want {
			t.Errorf("%s: restarted at try %d, want %d", tc.name, got, tc.want)
		}
	}
}
