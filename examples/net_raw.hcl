# Nomad issue 11958: an exec task asking for a capability outside the allow
# list. Nomad's executor was left running after this failure; tether
# refuses it cleanly, names the capability, and leaves no process behind.
#
#   tether run examples/net_raw.hcl      # fails, naming net_raw
#   tether events net_raw                # the walk it took
task "net_raw" {
  driver = "exec"

  config {
    command = "/bin/ping"
    args    = ["-c", "1", "127.0.0.1"]
    cap_add = ["net_raw"]
  }
}
