//go:build tools

// Karpenter with its kwok cloud provider as a pinned test dependency of the
// peer-figures bench; scripts/karpenter builds it with
// `go build sigs.k8s.io/karpenter/kwok` and takes its CRDs from this
// module's copy of sigs.k8s.io/karpenter (kwok/charts/crds).
package tools

import (
	_ "sigs.k8s.io/karpenter/kwok"
)
