package supervisor

import "syscall"

// Status is how the command's direct child ended.
type Status struct {
	Code   int            // exit status when it exited
	Signal syscall.Signal // the signal it died of, else 0
}
