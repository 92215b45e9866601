package cluster

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// flushTimeout bounds the last catch-up of a node whose agent is
// stopping: long enough for a few transactions, short enough that a
// stop never hangs on an etcd that does not answer.
const flushTimeout = 3 * time.Second

// flush mirrors what the local log holds that the mirror does not, once,
// from etcd's heads, under lease: the node's last word before its agent
// exits. A task stopped just before the agent exits is then mirrored as
// stopped, not left live (and shown unknown) while the node is down. It
// is called after the mirror's goroutine ended, so it owns the mirror's
// state; an error is logged, never fatal (the next agent catches up).
func (m *mirror) flush(ctx context.Context, lease clientv3.LeaseID) error {
	if err := m.loadHeads(ctx); err != nil {
		return err
	}
	m.n.cfg.Changes.take()
	if err := m.reconcile(ctx, lease); err != nil {
		return err
	}
	for conflicts := 0; len(m.pending) > 0 && conflicts < 10; {
		bt, err := m.collect(ctx, lease)
		if err != nil {
			return err
		}
		if len(bt.tasks) == 0 {
			return nil
		}
		ok, err := m.commit(ctx, lease, bt)
		if err != nil {
			return err
		}
		if !ok {
			conflicts++ // heads refreshed from etcd's answer: go on from them
		}
	}
	return nil
}
