// Package gpexec is the peer tether is measured against: an executor plugin
// built on github.com/hashicorp/go-plugin over gRPC, the way Nomad's exec
// and raw_exec drivers run their executor. Its one RPC, Launch, fork/execs
// the task in its own process group. The messages are protobuf well-known
// types (structpb), so no generated code is needed; the wire cost is a real
// proto encoding.
package gpexec

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// Handshake is the go-plugin handshake both sides agree on.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "TETHER_BENCH_PLUGIN",
	MagicCookieValue: "executor",
}

// Name is the plugin's name in the plugin map.
const Name = "executor"

// Executor launches a task and returns its pid.
type Executor interface {
	Launch(ctx context.Context, command string, args []string) (int, error)
}

// Plugin is the go-plugin plugin of an Executor.
type Plugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Executor
}

var _ plugin.GRPCPlugin = (*Plugin)(nil)

// Plugins is the plugin map of the client side.
func Plugins() map[string]plugin.Plugin { return map[string]plugin.Plugin{Name: &Plugin{}} }

const launchMethod = "/tetherbench.Executor/Launch"

// launcher is the service's handler type.
type launcher interface {
	launch(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error)
}

type server struct{ impl Executor }

func (s server) launch(ctx context.Context, in *structpb.Struct) (*structpb.Struct, error) {
	m := in.AsMap()
	cmd, _ := m["command"].(string)
	var args []string
	if l, ok := m["args"].([]any); ok {
		for _, a := range l {
			s, _ := a.(string)
			args = append(args, s)
		}
	}
	pid, err := s.impl.Launch(ctx, cmd, args)
	if err != nil {
		return nil, err
	}
	return structpb.NewStruct(map[string]any{"pid": float64(pid)})
}

var serviceDesc = grpc.ServiceDesc{
	ServiceName: "tetherbench.Executor",
	HandlerType: (*launcher)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Launch",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Struct)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, req any) (any, error) {
				return srv.(launcher).launch(ctx, req.(*structpb.Struct))
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: launchMethod}, h)
		},
	}},
	Metadata: "executor.proto",
}

// GRPCServer implements plugin.GRPCPlugin.
func (p *Plugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&serviceDesc, server{p.Impl})
	return nil
}

// GRPCClient implements plugin.GRPCPlugin.
func (p *Plugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return client{c}, nil
}

type client struct{ c *grpc.ClientConn }

func (c client) Launch(ctx context.Context, command string, args []string) (int, error) {
	l := make([]any, len(args))
	for i, a := range args {
		l[i] = a
	}
	in, err := structpb.NewStruct(map[string]any{"command": command, "args": l})
	if err != nil {
		return 0, err
	}
	out := new(structpb.Struct)
	if err := c.c.Invoke(ctx, launchMethod, in, out); err != nil {
		return 0, err
	}
	pid, ok := out.AsMap()["pid"].(float64)
	if !ok || pid <= 0 {
		return 0, errors.New("gpexec: no pid in answer")
	}
	return int(pid), nil
}
