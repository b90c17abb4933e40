package cli

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"

	"github.com/alecthomas/kong"
)

// valueShape is what kong parses a flag or an argument by: everything of
// its model but the help texts (which the run-only model drops) and the
// parse's own state.
func valueShape(v *kong.Value) string {
	tag := *v.Tag
	tag.Help = ""
	s := fmt.Sprintf("name=%q default=%v:%q enum=%q required=%v format=%q position=%d passthrough=%v/%v mapper=%T target=%v tag=%+v",
		v.Name, v.HasDefault, v.Default, v.Enum, v.Required, v.Format, v.Position, v.Passthrough, v.PassthroughMode,
		v.Mapper, v.Target.Type(), tag)
	if f := v.Flag; f != nil {
		group := ""
		if f.Group != nil {
			group = f.Group.Key
		}
		s += fmt.Sprintf(" flag: short=%q aliases=%q envs=%q placeholder=%q xor=%q and=%q lastwins=%q hidden=%v negated=%v group=%q",
			f.Short, f.Aliases, f.Envs, f.PlaceHolder, f.Xor, f.And, f.LastWins, f.Hidden, f.Negated, group)
	}
	return s
}

// nodeShape is a command node's flags and arguments, by name.
func nodeShape(n *kong.Node) map[string]string {
	m := map[string]string{"node": fmt.Sprintf("name=%q type=%v hidden=%v aliases=%q passthrough=%v default=%v",
		n.Name, n.Type, n.Hidden, n.Aliases, n.Passthrough, n.DefaultCmd != nil)}
	for _, f := range n.Flags {
		m["--"+f.Name] = valueShape(f.Value)
	}
	for _, p := range n.Positional {
		m["<"+p.Name+">"] = valueShape(p)
	}
	return m
}

// The run-only model (parseRun's) is the whole model's globals and run
// node, help texts aside: every flag's name, short name, aliases,
// variables, default, enum, placeholder, mapper and groups, and the
// command's argument, so that no command line or environment can be read
// differently by the two (the model, not only sampled lines).
func TestRunModelIsTheWholeModelsGlobalsAndRun(t *testing.T) {
	var fast CLI
	fk, _ := parseRun(&fast, []string{"run", "--key", "k", "--", "true"})
	if fk == nil {
		t.Fatal("the run-only model refused run --key k -- true")
	}
	var whole CLI
	wk, err := kong.New(&whole, append(parserOptions(func(int) {}), kong.Writers(io.Discard, io.Discard))...)
	if err != nil {
		t.Fatal(err)
	}
	find := func(k *kong.Kong, name string) *kong.Node {
		for _, c := range k.Model.Children {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no %s command", name)
		return nil
	}
	for _, pair := range [][2]*kong.Node{{fk.Model.Node, wk.Model.Node}, {find(fk, "run"), find(wk, "run")}} {
		f, w := nodeShape(pair[0]), nodeShape(pair[1])
		delete(f, "node") // the root's children differ by design
		delete(w, "node")
		if pair[0].Name == "run" {
			f["node"], w["node"] = nodeShape(pair[0])["node"], nodeShape(pair[1])["node"]
		}
		names := slices.Sorted(func(yield func(string) bool) {
			for k := range w {
				if !yield(k) {
					return
				}
			}
		})
		if len(names) < 5 {
			t.Fatalf("%s: only %d flags and arguments in the whole model: %v", pair[1].Name, len(names), names)
		}
		for _, name := range names {
			if f[name] != w[name] {
				t.Errorf("%s %s:\nrun-only %s\nwhole    %s", pair[1].Name, name, f[name], w[name])
			}
		}
		for name := range f {
			if _, ok := w[name]; !ok {
				t.Errorf("%s %s: only in the run-only model: %s", pair[1].Name, name, f[name])
			}
		}
	}
	if got, want := len(fk.Model.Flags), len(wk.Model.Flags); got != want {
		t.Errorf("%d global flags in the run-only model, %d in the whole one", got, want)
	}
	if !reflect.DeepEqual(fk.Model.Vars(), wk.Model.Vars()) {
		t.Errorf("interpolation variables differ:\nrun-only %v\nwhole    %v", fk.Model.Vars(), wk.Model.Vars())
	}
}
