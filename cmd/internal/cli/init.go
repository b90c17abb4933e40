package cli

import (
	"fmt"
	"os/user"
	"strconv"

	"github.com/fencerun/fencerun/store/filestore"
)

// InitCmd is `fencerun init --group G DIR`.
type InitCmd struct {
	Group string `required:"" placeholder:"GROUP" help:"The group whose members (and root) share the store's keys."`
	Path  string `arg:"" name:"dir" placeholder:"DIR" help:"The store's directory: new, or empty and yours; its parent must exist."`
}

// Help explains the trust a group store implies.
func (InitCmd) Help() string {
	return "Makes DIR a group store (S9 in the contract): group GROUP, mode 2770; every file in it 0660 and every directory 2770 in GROUP, set explicitly whatever the umask. Members of GROUP and root then share its keys by naming it with the same --dir, and are trusted with each other's leases: any member can read the others' tokens, release or cancel their leases. Nobody else can use it (exit 125).\n\nExample:\n  sudo fencerun init --group deploy /var/lib/fencerun-deploy\n  fencerun --dir /var/lib/fencerun-deploy run --key deploy:prod -- ./deploy.sh"
}

// Run creates the store.
func (c *InitCmd) Run() error {
	g, err := user.LookupGroup(c.Group)
	if err != nil {
		if g, err = user.LookupGroupId(c.Group); err != nil {
			return usage("--group %s: no such group", c.Group)
		}
	}
	gid, _ := strconv.Atoi(g.Gid)
	already, err := filestore.Init(c.Path, gid)
	if err != nil {
		return fail(exitFailed, "%v", err)
	}
	if already {
		fmt.Printf("%s is already a group store of %s\n", c.Path, g.Name)
		return nil
	}
	fmt.Printf("created the group store %s for group %s (mode 2770): its members and root share its keys and are trusted with each other's leases\n", c.Path, g.Name)
	return nil
}
