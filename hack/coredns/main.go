// Command coredns serves cluster.local for the node of the local dev stack. It is CoreDNS
// with only the plugins the node's Corefile uses: the full plugin set (cloud DNS providers,
// etcd, ...) would triple the build for nothing, and without `forward` no query can leave
// the machine (the stack's network rule holds by construction).
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	// The plugins' order in a server block follows this list (upstream's order, kept).
	dnsserver.Directives = []string{
		"bind", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes",
	}
}

func main() { coremain.Run() }
