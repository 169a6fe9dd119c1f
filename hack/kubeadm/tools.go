//go:build tools

// Package tools pins kubeadm for kind's node image (`antidote dev build --kind`), at the
// version of the kubelet built by hack/k8s. Its own module: kubeadm needs modules
// (cli-runtime, system-validators, corefile-migration) the stack's binaries do not, and
// adding them to hack/k8s would change its go.sum, the cache key of every binary built there.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
