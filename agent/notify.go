package agent

import (
	"fmt"
	"net"
	"os"
)

// NotifyReady tells a service manager that started the agent with
// NOTIFY_SOCKET (systemd's Type=notify) that it serves: READY=1 and its
// MAINPID. Without NOTIFY_SOCKET it does nothing.
func NotifyReady() error {
	return notify(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving", os.Getpid()))
}

// NotifyStopping tells the service manager that the agent is stopping.
func NotifyStopping() error { return notify("STOPPING=1") }

func notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' { // an abstract socket
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("agent: notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("agent: notify %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return nil
}
