package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The manual page is generated from the command model: the checked-in
// docs/fencerun.1 must be what the model makes now (just man rewrites
// it), and it must name every command.
func TestManPage(t *testing.T) {
	var cli CLI
	k, err := newParser(&cli, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	page := manPage(k)
	checked, err := os.ReadFile("../../../docs/fencerun.1")
	if err != nil {
		t.Fatalf("%v (just man writes it)", err)
	}
	if string(checked) != page {
		t.Errorf("docs/fencerun.1 is stale: run just man and commit it")
	}
	for _, n := range k.Model.Children {
		if n.Hidden {
			continue
		}
		if !regexp.MustCompile(`(?m)^\\fB` + regexp.QuoteMeta(n.Name) + `[ \\]`).MatchString(page) {
			t.Errorf("the manual page has no entry for the command %s", n.Name)
		}
		if !strings.Contains(page, "\nfencerun "+n.Name) {
			t.Errorf("the manual page's synopsis does not show fencerun %s", n.Name)
		}
	}
	for _, section := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT", "EXAMPLES"} {
		if !strings.Contains(page, "\n.SH "+section+"\n") {
			t.Errorf("the manual page has no %s section", section)
		}
	}
}
