package store

import (
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxTextLen bounds the text a user supplies for a holder (--name,
// --reason): it is kept in every record and queue entry, and a record must
// stay far below what a reader accepts as one (S9, B2).
const MaxTextLen = 1024

// ValidateText checks user-supplied holder text (what names the flag, for
// the message) against MaxTextLen.
func ValidateText(what, s string) error {
	if len(s) > MaxTextLen {
		return fmt.Errorf("%s is %d bytes, over the limit of %d bytes (1 KiB)", what, len(s), MaxTextLen)
	}
	return nil
}

// Printable is s as text output shows it (S9): control characters, and
// bytes that are not UTF-8, escaped as Go escapes them (\n, \x1b, \u0085),
// so that a name or reason can neither forge rows nor reach a terminal as
// an escape sequence. A backslash is doubled, so the escaped form is
// unambiguous. JSON output does not use it: JSON is exact already.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || r == utf8.RuneError || unicode.IsControl(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case unicode.IsControl(r):
			q := fmt.Sprintf("%+q", string(r)) // "\n", "\x1b", "\u0085"
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Revoker says who revokes a lease, for its history (N2): this process,
// its user and host.
func Revoker(host string) string {
	who := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(who); err == nil {
		who = u.Username
	}
	return fmt.Sprintf("pid %d (%s) on %s", os.Getpid(), Printable(who), Printable(host))
}
