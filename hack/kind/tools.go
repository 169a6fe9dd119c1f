//go:build tools

// Package tools pins kind (`antidote dev build --kind`; docs/kind.md): its command, and the
// node image's base files (images/base/files), which the node image builder copies from
// this module.
package tools

import (
	_ "sigs.k8s.io/kind"
)
