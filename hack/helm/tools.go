//go:build tools

// Package tools pins the Helm command built by antidote dev build.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
