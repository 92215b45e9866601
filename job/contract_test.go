package job

// The package's promises (doc.go), each with the test that holds it:
//
//	Read parses with every input (-var, -var-file
//	  in order, NOMAD_VAR_, dispatch meta)            TestRead_Inputs
//	a file that does not parse is a *ParseError
//	  with its lines; a bad input, a selection that
//	  names nothing, nothing runnable, an unknown
//	  reference, an unmet constraint, an invalid
//	  spec: refused by Read, by name                  TestRead_Refusals
//	Read writes nothing (its dry run allocates no
//	  port, makes no directory)                       TestRead_WritesNothing
//	the node's check of a spec runs on every task
//	  of every copy of the dry run                    TestRead_NodeCheckSpec
//	a template's source or a local artifact outside
//	  the task's and group's directories and
//	  --allow-read is refused, naming --allow-read    TestPolicy_AllowRead
//	the entry's name: the selection's, the job's,
//	  a task file's one task's, the file's stem       TestRead_Names
//	Instantiate: every copy an allocation with its
//	  ids, hooks, directories, NOMAD_* variables,
//	  ports (allocated, one per copy) and
//	  reschedule policy in each spec                  TestRead_AJobOfHooksPortsAndCopies, TestRead_Batch
//	ids that do not fit refused; a failed
//	  instantiation lets go of its ports              TestInstantiate_IDsAndPorts, TestInstantiate_Overrides
//	overrides: every task's; --name and --dir only
//	  for a run of one task                           TestInstantiate_Overrides
//	Digest changes with the text and every input,
//	  and with nothing else                           TestDigest
//	a later copy's task ids are derived from the
//	  allocation and the generation                   TestIDs
//	the drivers a file may use are the operator's
//	  (--allow-drivers; a spec from etcd, ForRemote:
//	  --allow-remote-drivers, default exec), refused
//	  by name on Read's and Vet's path                TestPolicy_DriversByTheOperatorsWord
//	pid_mode/ipc_mode = "host" need
//	  --allow-host-namespaces naming that namespace   TestPolicy_HostNamespacesByTheOperatorsWord
//	a group's count is bounded (--max-count)          TestPolicy_MaxCount
//	a bad list names its flag                         TestPolicy_ValidateNamesTheFlag
//	a file past a parse limit is a *ParseError
//	  naming it (the compute bomb)                    TestVet_ComputeBombIsAParseErrorNamingTheLimit
