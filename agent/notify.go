package agent

import (
	"fmt"
	"net"
	"os"
	"sync"
)

// notifySocket is the service manager's NOTIFY_SOCKET, taken out of the
// environment the first time it is read (Open reads it): the executors the
// agent spawns, and their tasks, must not inherit it and speak for the
// agent (sd_notify's unset_environment).
var notifySocket = sync.OnceValue(func() string {
	path := os.Getenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("NOTIFY_SOCKET")
	return path
})

// NotifyReady tells a service manager that started the agent with
// NOTIFY_SOCKET (systemd's Type=notify) that it serves: READY=1 and its
// MAINPID. Without NOTIFY_SOCKET it does nothing.
func NotifyReady() error {
	return notify(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving", os.Getpid()))
}

// NotifyStopping tells the service manager that the agent is stopping.
func NotifyStopping() error { return notify("STOPPING=1") }

func notify(state string) error {
	given := notifySocket()
	if given == "" {
		return nil
	}
	path := given
	if path[0] == '@' { // an abstract socket
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("agent: notify %s: %w", given, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("agent: notify %s: %w", given, err)
	}
	return nil
}
