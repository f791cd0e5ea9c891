//go:build tools

// Kueue's manager as a pinned test dependency of the lab; scripts/kueue
// builds it with `go build sigs.k8s.io/kueue/cmd/kueue` and takes its CRDs
// from this module's copy of sigs.k8s.io/kueue (config/components/crd).
package tools

import (
	_ "sigs.k8s.io/kueue/cmd/kueue"
)
