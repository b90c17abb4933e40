//go:build !fencerun_stamps

package stamps

// Mark does nothing without the fencerun_stamps build tag.
func Mark(string) {}

// Dump does nothing without the fencerun_stamps build tag.
func Dump() {}
