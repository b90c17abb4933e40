// Package errtext turns an error chain into the sentence fencerun shows a
// user: without the package prefixes that Go's sentinel errors carry
// ("supervisor:", "store:") and without labels that the next part of the
// chain says again ("fence: lost: store: lease lost: the lease on "k"
// (fence 3) was revoked" reads "the lease on "k" (fence 3) was revoked").
//
// It only rewrites text: errors.Is and errors.As still see the chain. It
// does not know every package's messages; a part it does not recognise is
// kept as it is.
package errtext

import "strings"

// prefixes are the packages whose names lead their sentinel errors.
var prefixes = map[string]bool{
	"fence": true, "fenced": true, "store": true, "filestore": true, "etcdstore": true,
	"resident": true, "supervisor": true,
}

// labels are parts of a chain that only name its kind; the part after
// them says what happened.
var labels = map[string]bool{
	"lost": true, "lease lost": true, "lease not acquired": true,
}

// Sentence is err's message as one sentence.
func Sentence(err error) string {
	if err == nil {
		return ""
	}
	parts := strings.Split(err.Error(), ": ")
	kept := parts[:0:0]
	for i, p := range parts {
		last := i == len(parts)-1
		switch {
		case prefixes[p] && !last:
		case labels[p] && !last:
		default:
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ": ")
}
