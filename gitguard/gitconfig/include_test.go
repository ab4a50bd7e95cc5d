package gitconfig

import (
	"slices"
	"testing"
)

func TestHostConfigFiles(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"HOME": "/h"}, []string{"/etc/gitconfig", "/h/.config/git/config", "/h/.gitconfig"}},
		{map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "/x", "GIT_CONFIG_NOSYSTEM": "1"}, []string{"/x/git/config", "/h/.gitconfig"}},
		{map[string]string{"HOME": "/h", "GIT_CONFIG_GLOBAL": "/g", "GIT_CONFIG_SYSTEM": "/s"}, []string{"/s", "/g"}},
	}
	for _, c := range cases {
		if got := HostConfigFiles(env(c.env)); !slices.Equal(got, c.want) {
			t.Errorf("%v: got %v, want %v", c.env, got, c.want)
		}
	}
}
