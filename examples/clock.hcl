# A small service for the fleet: print the time every 5 seconds, until
# stopped.
#
#   tether cluster start --node n1 examples/clock.hcl
#   tether cluster events clock -f
#   tether cluster stop --node n1 clock
task "clock" {
  driver = "raw_exec"

  config {
    command = "/bin/sh"
    args    = ["-c", "while :; do date; sleep 5; done"]
  }
}
