// Package jsonstr appends JSON strings as encoding/json writes them, for
// the hand-made encoders on the hot paths (store/filestore's record,
// internal/fences's counter), which fall back to encoding/json for
// anything this does not write.
//
// It guarantees that what AppendPlain appends, when it says so, is byte
// for byte what encoding/json.Marshal gives for the string; it does not
// escape: a string that would need escaping is left to encoding/json.
package jsonstr

// AppendPlain appends s quoted and returns true when no byte of s is one
// encoding/json would escape (control characters, non-ASCII, `"`, `\`,
// and its HTML-safe `<`, `>`, `&`); otherwise it returns b as it was and
// false.
func AppendPlain(b []byte, s string) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return b, false
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), true
}
