package integration

import (
	"encoding/binary"
	"encoding/json"
	"os"
)

// readLeaseRecord reads the JSON record of a key's lease file: the newer of
// its two slots (internal/statefs: a 24-byte header with the
// sequence number at 8 and the length at 16) that holds valid JSON.
func readLeaseRecord(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var best []byte
	var bestSeq uint64
	size := len(b) / 2
	for i := 0; i < 2 && size >= 24; i++ {
		s := b[i*size : (i+1)*size]
		seq, n := binary.LittleEndian.Uint64(s[8:]), int(binary.LittleEndian.Uint32(s[16:]))
		if string(s[:4]) != "FRS\x01" || n > size-24 || !json.Valid(s[24:24+n]) {
			continue
		}
		if best == nil || seq > bestSeq {
			best, bestSeq = s[24:24+n], seq
		}
	}
	if best == nil {
		return b, nil // not slotted: let the caller's decoding say so
	}
	return best, nil
}
