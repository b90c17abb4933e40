package slots

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// ParseKnown says what Parse says of every file: one this process wrote a
// slot of last, then the other slot written by someone else (newer, older,
// the same number), either slot cut at every byte or flipped at any byte,
// and with an enc that is not the file's.
func TestParseKnownIsParse(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	record := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return b
	}
	check := func(name string, raw []byte, slot int, enc []byte) {
		t.Helper()
		want, werr := Parse(raw)
		got, gerr := ParseKnown(raw, slot, enc)
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(want, got) {
			t.Fatalf("%s: ParseKnown = %+v, %v; Parse = %+v, %v", name, got, gerr, want, werr)
		}
	}
	for round := range 40 {
		f, err := Whole(record(1+r.IntN(600)), uint64(2+r.IntN(1000)))
		if err != nil {
			t.Fatal(err)
		}
		file, err := Parse(f)
		if err != nil {
			t.Fatal(err)
		}
		// This process writes in place, as a holder's renewal does.
		before := bytes.Clone(f)
		off, enc := file.Next(record(1 + r.IntN(600)))
		copy(f[off:], enc)
		slot := int(off) / file.Size
		check(fmt.Sprintf("round %d: own write", round), f, slot, enc)
		// Someone else's write to the other slot: newer (a revocation),
		// or with a number not above ours.
		for _, seq := range []uint64{file.Seq + 1, file.Seq, file.Seq - 1} {
			g := bytes.Clone(f)
			copy(g[(1-slot)*file.Size:], Encode(record(1+r.IntN(600)), seq, file.Size))
			check(fmt.Sprintf("round %d: other slot at %d", round, seq), g, slot, enc)
			// Their write cut at every byte.
			other := Encode(record(1+r.IntN(300)), seq, file.Size)
			for cut := range len(other) {
				h := bytes.Clone(f)
				copy(h[(1-slot)*file.Size:], other[:cut])
				check(fmt.Sprintf("round %d: other slot at %d cut at %d", round, seq, cut), h, slot, enc)
			}
		}
		// Our own slot cut at every byte (a write torn by a crash), or
		// one byte of it changed.
		for cut := range len(enc) {
			g := bytes.Clone(before)
			copy(g[off:], enc[:cut])
			check(fmt.Sprintf("round %d: own slot cut at %d", round, cut), g, slot, enc)
			g = bytes.Clone(f)
			g[int(off)+cut] ^= 1 << r.IntN(8)
			check(fmt.Sprintf("round %d: own slot byte %d flipped", round, cut), g, slot, enc)
		}
		// An enc that is not what the file holds, or names the other slot.
		check(fmt.Sprintf("round %d: other enc", round), f, slot, Encode(record(10), file.Seq, file.Size))
		check(fmt.Sprintf("round %d: wrong slot", round), f, 1-slot, enc)
		check(fmt.Sprintf("round %d: short enc", round), f, slot, enc[:Header-1])
	}
}

// The slot ParseKnown is told of is taken as the bytes Encode made, not
// checked again: here an enc whose checksum is wrong, which Parse refuses,
// is taken, which shows the check skipped (enc must be Encode's).
func TestParseKnownTrustsEnc(t *testing.T) {
	f, err := Whole([]byte(`{"a":1}`), 5)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := Parse(f)
	off, enc := file.Next([]byte(`{"a":2}`))
	enc[crcAt] ^= 1
	copy(f[off:], enc)
	if got, _ := Parse(f); got.Seq != 5 {
		t.Fatalf("Parse took seq %d, want 5 (the slot with the wrong checksum refused)", got.Seq)
	}
	got, err := ParseKnown(f, int(off)/file.Size, enc)
	if err != nil || got.Seq != 6 || string(got.Data) != `{"a":2}` {
		t.Fatalf("ParseKnown = %+v, %v; want the known slot, seq 6", got, err)
	}
}
