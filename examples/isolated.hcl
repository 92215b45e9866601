# An isolated exec task: its own PID, mount, IPC and UTS namespaces, a root
# of read-only bind mounts, user nobody, Nomad's default capabilities, and
# a cgroup with a 64 MB memory limit. It shows what it sees from inside.
# Needs root (namespaces, pivot_root, cgroups).
#
#   tether run examples/isolated.hcl
task "isolated" {
  driver = "exec"

  config {
    command = "/bin/sh"
    args    = ["-c", "echo \"uid $(id -u), pid $$, $(ls /proc | grep -c '^[0-9]') processes in sight\"; echo \"root: $(ls / | tr '\\n' ' ')\"; echo \"/etc/shadow: $(wc -c < /etc/shadow) bytes\""]
  }

  resources {
    memory = 64
    pids   = 32
  }
}
