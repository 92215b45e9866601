package executor
