//go:build tools

// The control-plane commands this module pins; scripts/bootstrap builds them
// with `go build k8s.io/kubernetes/cmd/...`.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
