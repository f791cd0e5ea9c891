// fit-harness answers, for cluster snapshots and pending pods, which nodes
// kube-scheduler v1.37.2's own filter plugins admit each pod to, and why
// each other node is rejected: the scheduler framework built from the
// in-tree registry (k8s.io/kubernetes/pkg/scheduler/framework/runtime
// NewFramework, plugins.NewInTreeRegistry) over a snapshot of the cluster
// (backend/cache.NewSnapshot), PreFilter then Filter on every node, the way
// cluster-autoscaler's scheduler-based predicate checker calls it
// (simulator/clustersnapshot/predicate/plugin_runner.go). Accord's fit is
// tested against its answers (benches/src/fitdiff).
//
// The profile is the default profile's filters that Accord models today:
// NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
// NodeResourcesFit, InterPodAffinity and PodTopologySpread, each with the
// default profile's arguments (KubeSchedulerConfiguration v1 defaults).
// Feature gates are the binary's defaults, as kube-scheduler's are.
//
//	fit-harness < cases.jsonl > answers.jsonl
//
// Each input line: {"namespaces": [Namespace], "nodes": [Node], "pods":
// [Pod bound, spec.nodeName set], "pending": [Pod]}; each output line:
// {"pods": [{"pod": "ns/name", "nodes": {"NODE": "" (admitted) or
// "Plugin: reason; reason"}}]} in the order of "pending". Namespaces are
// read from the first line only (the namespace lister is an informer).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	schedulerframework "k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

type input struct {
	Namespaces []v1.Namespace `json:"namespaces"`
	Nodes      []v1.Node      `json:"nodes"`
	Pods       []v1.Pod       `json:"pods"`
	Pending    []v1.Pod       `json:"pending"`
}

type podAnswer struct {
	Pod   string            `json:"pod"`
	Nodes map[string]string `json:"nodes"`
}

type output struct {
	Pods []podAnswer `json:"pods"`
}

// The filters compared, as the default profile orders them.
var filters = []string{
	names.NodeUnschedulable,
	names.NodeName,
	names.TaintToleration,
	names.NodeAffinity,
	names.NodePorts,
	names.NodeResourcesFit,
	names.PodTopologySpread,
	names.InterPodAffinity,
}

func profile() (*config.KubeSchedulerProfile, error) {
	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	p := cfg.Profiles[0]
	enabled := []config.Plugin{{Name: names.PrioritySort}, {Name: names.DefaultBinder}}
	for _, f := range filters {
		enabled = append(enabled, config.Plugin{Name: f})
	}
	p.Plugins = &config.Plugins{MultiPoint: config.PluginSet{Enabled: enabled}}
	return &p, nil
}

func main() {
	klog.SetOutput(os.Stderr)
	metrics.InitMetrics()
	ctx := context.Background()
	prof, err := profile()
	if err != nil {
		fail("default profile: %v", err)
	}
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var factory informers.SharedInformerFactory
	var f schedulerframework.Framework
	// One framework for every case (a framework per case registers its
	// informers' handlers again each time, and slows with every case): its
	// snapshot is swapped under it.
	lister := &swappable{}
	registry := plugins.NewInTreeRegistry()
	for line := 1; ; line++ {
		text, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(text))) == 0 {
			if err != nil {
				return
			}
			continue
		}
		var c input
		if err := json.Unmarshal(text, &c); err != nil {
			fail("line %d: %v", line, err)
		}
		if factory == nil {
			client := fake.NewClientset()
			for i := range c.Namespaces {
				if _, err := client.CoreV1().Namespaces().Create(ctx, &c.Namespaces[i], metav1.CreateOptions{}); err != nil {
					fail("namespace %s: %v", c.Namespaces[i].Name, err)
				}
			}
			factory = informers.NewSharedInformerFactory(client, 0)
		}
		pods := make([]*v1.Pod, len(c.Pods))
		for i := range c.Pods {
			pods[i] = &c.Pods[i]
		}
		nodes := make([]*v1.Node, len(c.Nodes))
		for i := range c.Nodes {
			nodes[i] = &c.Nodes[i]
		}
		snapshot := cache.NewSnapshot(pods, nodes)
		lister.Snapshot = snapshot
		if f == nil {
			f, err = runtime.NewFramework(ctx, registry, prof,
				runtime.WithInformerFactory(factory),
				runtime.WithSnapshotSharedLister(lister),
			)
			if err != nil {
				fail("line %d: framework: %v", line, err)
			}
			// The listers the plugins asked for, synced once.
			factory.Start(ctx.Done())
			factory.WaitForCacheSync(ctx.Done())
		}
		infos, err := snapshot.NodeInfos().List()
		if err != nil {
			fail("line %d: %v", line, err)
		}
		var o output
		for i := range c.Pending {
			o.Pods = append(o.Pods, answer(ctx, f, &c.Pending[i], infos))
		}
		b, err := json.Marshal(o)
		if err != nil {
			fail("line %d: %v", line, err)
		}
		out.Write(b)
		out.WriteByte('\n')
		if err := out.Flush(); err != nil {
			fail("stdout: %v", err)
		}
	}
}

// swappable is the framework's snapshot lister: the case's snapshot,
// swapped between cases (cluster-autoscaler's DelegatingSchedulerSharedLister
// does the same).
type swappable struct {
	*cache.Snapshot
}

func answer(ctx context.Context, f schedulerframework.Framework, pod *v1.Pod, infos []fwk.NodeInfo) podAnswer {
	a := podAnswer{Pod: pod.Namespace + "/" + pod.Name, Nodes: map[string]string{}}
	state := schedulerframework.NewCycleState()
	pre, status, _ := f.RunPreFilterPlugins(ctx, state, pod)
	for _, info := range infos {
		name := info.Node().Name
		switch {
		case !status.IsSuccess():
			a.Nodes[name] = why(status)
		case !pre.AllNodes() && !pre.NodeNames.Has(name):
			a.Nodes[name] = "PreFilter: node not among the nodes PreFilter kept"
		default:
			if s := f.RunFilterPlugins(ctx, state, pod, info); !s.IsSuccess() {
				a.Nodes[name] = why(s)
			} else {
				a.Nodes[name] = ""
			}
		}
	}
	return a
}

func why(s *fwk.Status) string {
	reasons := append([]string(nil), s.Reasons()...)
	sort.Strings(reasons)
	return s.Plugin() + ": " + strings.Join(reasons, "; ")
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fit-harness: "+format+"\n", args...)
	os.Exit(1)
}
