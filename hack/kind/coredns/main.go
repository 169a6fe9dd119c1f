// CoreDNS for kind's node image (`antidote dev build --kind`, docs/kind.md): the plugins
// of the Corefile kubeadm writes (errors, health, ready, kubernetes, prometheus, forward,
// cache, loop, reload, loadbalance), in CoreDNS's own order (its plugin.cfg). The stack's
// node runs the smaller build of hack/coredns with a Corefile of its own; this one is a
// module of its own so that build's go.sum (its cache key) stays as it is.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func init() {
	dnsserver.Directives = []string{
		"reload", "ready", "health", "prometheus", "errors", "log", "loadbalance", "cache",
		"kubernetes", "loop", "forward",
	}
}

func main() { coremain.Run() }
