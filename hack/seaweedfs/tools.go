//go:build tools

// Package tools pins SeaweedFS's `weed` command, the local stack's S3-compatible server
// (`antidote dev up --s3`), built by antidote dev build.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
