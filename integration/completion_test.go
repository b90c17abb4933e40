package integration

import (
	"strings"
	"testing"
)

// The bash completion script at work in an interactive bash on a pty, as a
// user presses Tab: a command, and a key with a colon in it, which bash
// would otherwise split into two words (deploy:deploy:staging), with the
// shell's COMP_WORDBREAKS left as it was.
func TestCompletionInBash(t *testing.T) {
	t.Parallel()
	s := newSandbox(t)
	if code := s.run("setup", "run", "--key", "deploy:staging", "--", "true"); code != 0 {
		t.Fatalf("setup run: exit %d", code)
	}
	p := startPty(t, s, `PS1='$ ' exec bash --norc --noprofile -i`)
	write := func(text string) {
		t.Helper()
		if _, err := p.tty.Write([]byte(text)); err != nil {
			t.Fatal(err)
		}
	}
	write("source <(fencerun completion bash); echo sourced-$((6*7))\n")
	p.waitOutput("sourced-42")
	// The script leaves the shell's word breaks alone: other commands'
	// completions (scp host:path) still split at colons.
	write("[[ $COMP_WORDBREAKS == *:* ]] && echo colon-$((6*7))\n")
	p.waitOutput("colon-42")

	write("fencerun sta\t")
	p.waitOutput("fencerun status ")
	write("deploy:st\t")
	p.waitOutput("deploy:staging ")
	if out := p.output(); strings.Contains(out, "deploy:deploy") {
		t.Errorf("the key was completed as two words; pty output:\n%s", out)
	}
	// Run the completed line: it must be the status of that key.
	write("\n")
	p.waitOutput("state: free")
	if out := p.output(); !strings.Contains(out[strings.LastIndex(out, "deploy:staging "):], "key:   deploy:staging") {
		t.Errorf("the completed line did not show the key's status; pty output:\n%s", out)
	}
	write("exit\n")
	p.finish()
}
