package agentd

// ForceExpiredLinger makes every pump's post-exit deadline an expired one
// and has each read wait until its process has exited: the schedule of a
// pump that was not run within exitLinger of its command's exit (a loaded
// machine, gVisor). It returns the undo.
func ForceExpiredLinger() (undo func()) {
	linger, hook := exitLinger, testHookBeforeRead
	exitLinger = 0
	testHookBeforeRead = func(p *proc) { <-p.exitCh }
	return func() { exitLinger, testHookBeforeRead = linger, hook }
}
