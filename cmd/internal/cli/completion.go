package cli

// Shell completion and the manual page, both made from the kong model
// that --help shows, by libraries built for kong: completions by
// github.com/jotaen/kong-completion (on github.com/posener/complete), the
// manual page by github.com/alecthomas/mango-kong (on
// github.com/muesli/mango). Neither costs a run anything: the completion
// model is built only when the shell asks (COMP_LINE set), the manual page
// only by `fencerun man`.

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/hashicorp/go-hclog"
	kongcompletion "github.com/jotaen/kong-completion"
	"github.com/posener/complete"
)

// CompletionCmd is `fencerun completion bash|zsh|fish`.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// Help explains how the script works.
func (CompletionCmd) Help() string {
	return `Prints a script that makes SHELL complete fencerun's commands, flags and flag values and, for status, release, cancel, list and run --key, the keys that exist in the state root (--dir, FENCERUN_DIR or the default). The script asks this fencerun binary, by its absolute path, for each completion: print it again after moving the binary.`
}

// Usage of completion.
func (CompletionCmd) Usage() string { return "completion bash|zsh|fish" }

// Examples of completion.
func (CompletionCmd) Examples() string {
	return `  # for this shell session
  source <(fencerun completion bash)
  # for every session
  fencerun completion bash > /etc/bash_completion.d/fencerun
  fencerun completion zsh >> ~/.zshrc
  fencerun completion fish > ~/.config/fish/completions/fencerun.fish
`
}

// Run prints the script for the shell.
func (c *CompletionCmd) Run(kctx *kong.Context) error {
	if c.Shell == "bash" {
		self, err := os.Executable()
		if err != nil {
			return fail(exitFailed, "completion: %v", err)
		}
		fmt.Fprintf(kctx.Stdout, bashCompletion, "'"+strings.ReplaceAll(self, "'", `'\''`)+"'")
		return nil
	}
	return (&kongcompletion.Completion{Shell: c.Shell, Code: true}).Run(kctx)
}

// bashCompletion asks fencerun (%s, its quoted path) for the answers, as
// kong-completion's `complete -C` would, from a function: keys hold colons
// (deploy:staging), at which bash splits words, so that the answers are
// trimmed of what precedes the word's last colon, as bash-completion's
// __ltrim_colon_completions trims them, and COMP_WORDBREAKS stays as the
// shell has it.
const bashCompletion = `_fencerun() {
	local IFS=$'\n' cur=${COMP_LINE:0:COMP_POINT}
	cur=${cur##*[[:space:]]}
	COMPREPLY=($(COMP_LINE=$COMP_LINE COMP_POINT=$COMP_POINT %s))
	if [[ $cur == *:* && $COMP_WORDBREAKS == *:* ]]; then
		local colon=${cur%%"${cur##*:}"}
		COMPREPLY=("${COMPREPLY[@]#"$colon"}")
	fi
}
complete -o default -o bashdefault -F _fencerun fencerun
`

// answerCompletion answers the shell's completion request in COMP_LINE and
// returns the exit code.
func answerCompletion(k *kong.Kong, o logOptions) int {
	code := exitFailed
	kongcompletion.Register(k,
		kongcompletion.WithPredictor("key", complete.PredictFunc(existingKeys)),
		kongcompletion.WithExitFunc(func(c int) { code = c }),
		kongcompletion.WithErrorHandler(func(err error) { newLogger(o).Error("completion: " + err.Error()) }),
	)
	return code
}

// existingKeys are the keys of the state root the command line names:
// nothing at all on any error, for a completion has no one to tell. The
// whole line is read for --dir: a predictor's Args start at its command.
func existingKeys(complete.Args) []string {
	g := Globals{Dir: os.Getenv("FENCERUN_DIR"), log: hclog.NewNullLogger()}
	words := strings.Fields(os.Getenv("COMP_LINE"))
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, "--dir="); ok {
			g.Dir = v
		} else if w == "--dir" && i+1 < len(words) {
			g.Dir = words[i+1]
		}
	}
	backend, err := g.openStore(false)
	if err != nil {
		return nil
	}
	defer backend.Close()
	all, err := backend.List(context.Background())
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(all))
	for _, st := range all {
		if st.Key != "" {
			keys = append(keys, st.Key)
		}
	}
	return keys
}
