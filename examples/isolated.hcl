# A sandboxed exec task: its own PID, mount, IPC, UTS and cgroup
# namespaces, no network but loopback, a root of read-only bind mounts,
# user nobody with no capability at all (a non-root exec task holds only
# what cap_add names), a new session keyring, no_new_privs, Docker's
# default seccomp filter, and a cgroup with a 64 MB memory limit. It shows
# what it sees from inside. Needs root (namespaces, pivot_root, cgroups).
#
#   tether run examples/isolated.hcl
task "isolated" {
  driver = "exec"

  # "none": a network namespace with loopback alone. "host" (the default,
  # as in Nomad) shares the host's network, its loopback listeners and
  # abstract unix sockets included.
  network {
    mode = "none"
  }

  config {
    command = "/bin/sh"
    args    = ["-c", "echo \"uid $(id -u), pid $$, $(ls /proc | grep -c '^[0-9]') processes in sight\"; echo \"root: $(ls / | tr '\\n' ' ')\"; if cat /etc/shadow >/dev/null 2>&1; then echo '/etc/shadow: readable'; else echo '/etc/shadow: unreadable'; fi; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t' ' '; echo \"cgroup: $(cut -d: -f3 /proc/self/cgroup | sort -u | tr '\\n' ' ')\"; echo \"network: $(ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\""]

    # A non-root task gets exactly the capabilities named here (ambient),
    # each within the operator's allow list (--allow-caps), e.g.:
    # cap_add = ["net_bind_service"]

    # The syscall filter: "default" (Docker's profile), or "unconfined" or
    # the path of a Docker/OCI profile, each of which the operator must
    # allow with --allow-seccomp.
    seccomp = "default"
  }

  resources {
    memory = 64
    pids   = 32
  }
}
