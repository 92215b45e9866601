package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/tether-fsm/tether/internal/etcdtest"
)

func TestProbe_RefusedTimedOutAndAnswered(t *testing.T) {
	refused := fmt.Sprintf("http://127.0.0.1:%d", etcdtest.FreePort(t))
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close() // accepts (the kernel's backlog) and never answers
	live := etcdtest.Embedded(t)

	// Every endpoint refused: said at once, whatever the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	err = Probe(ctx, Config{Endpoints: []string{refused}})
	if !errors.Is(err, ErrRefused) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), refused) {
		t.Errorf("Probe of a refusing endpoint = %v, want ErrRefused naming it", err)
	}
	// One answers: nil, though another refuses.
	if err := Probe(ctx, Config{Endpoints: []string{refused, live}}); err != nil {
		t.Errorf("Probe with one live endpoint = %v", err)
	}
	if err := Probe(ctx, Config{Endpoints: []string{"http://" + silent.Addr().String()}}); err != nil {
		t.Errorf("Probe of an endpoint that accepts = %v: the connection is what it tests", err)
	}
	// An endpoint that does not answer before the deadline is a timeout,
	// said as one, not a refusal.
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()
	err = Probe(expired, Config{Endpoints: []string{"http://" + silent.Addr().String()}})
	if errors.Is(err, ErrRefused) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "in time") {
		t.Errorf("Probe past its deadline = %v, want a timeout (ErrUnavailable, DeadlineExceeded), not a refusal", err)
	}
}
