package filestore

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fencerun/fencerun/store"
)

// errNotKey: a name in the keys directory is not one that encodeKey makes.
var errNotKey = errors.New("filestore: not an encoded key")

const (
	keyPrefix = "k-"
	hexDigits = "0123456789abcdef"
)

// encodeKey maps a key to the name of its directory (CONTRACT.md B1). Bytes in
// [a-z0-9-] stay as they are; every other byte becomes '_' and two lowercase
// hex digits; the name starts with "k-". So the name holds no '/' and no '.'
// (no "..", no trailing dot), is never a Windows device name, and two keys
// that differ only in case never share it. A key of MaxKeyLen bytes encodes
// to at most 2+3*80 = 242 bytes, under the usual 255-byte name limit.
//
// encodeKey does not validate the key: callers do that first.
func encodeKey(key string) string {
	var b strings.Builder
	b.Grow(len(keyPrefix) + 3*len(key))
	b.WriteString(keyPrefix)
	for i := 0; i < len(key); i++ {
		c := key[i]
		if keepsItself(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('_')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0xf])
	}
	return b.String()
}

// decodeKey is the inverse of encodeKey. It accepts only the one name that
// encodeKey makes for a valid key, so decoding never maps two names to one
// key; any other name gives an error wrapping errNotKey.
func decodeKey(name string) (string, error) {
	rest, ok := strings.CutPrefix(name, keyPrefix)
	if !ok {
		return "", fmt.Errorf("%w: %q lacks the %q prefix", errNotKey, name, keyPrefix)
	}
	key := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if keepsItself(c) {
			key = append(key, c)
			continue
		}
		if c != '_' || i+2 >= len(rest) {
			return "", fmt.Errorf("%w: %q has %q at byte %d", errNotKey, name, c, i+len(keyPrefix))
		}
		hi, lo := unhex(rest[i+1]), unhex(rest[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("%w: %q has a bad escape at byte %d", errNotKey, name, i+len(keyPrefix))
		}
		d := byte(hi<<4 | lo)
		if keepsItself(d) {
			return "", fmt.Errorf("%w: %q escapes %q, which is never escaped", errNotKey, name, d)
		}
		key = append(key, d)
		i += 2
	}
	if err := store.ValidateKey(string(key)); err != nil {
		return "", fmt.Errorf("%w: %q decodes to a bad key: %w", errNotKey, name, err)
	}
	return string(key), nil
}

func keepsItself(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-'
}

// unhex accepts lowercase digits only, so every byte has one escape.
func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
