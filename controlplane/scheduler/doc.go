// Package scheduler assigns pods to nodes, as a small kube-scheduler built
// on the same framework ideas (see the framework package).
//
// # The cycle
//
// Informers keep pods, nodes and RuntimeClasses in memory. A pod waits for
// this scheduler when its spec.nodeName is empty, it is not being deleted
// and its spec.schedulerName is Config.Name ("default-scheduler" by
// default; an empty schedulerName counts as the default). Its
// "namespace/name" goes into a client-go rate-limited work queue, and one
// worker schedules one pod at a time:
//
//  1. Snapshot: one framework.NodeInfo per node, holding the non-terminal
//     pods bound to it and the pods this scheduler bound that the pod cache
//     does not show bound yet (the "assumed" pods, as kube-scheduler's
//     cache keeps them), so pods scheduled in quick succession see each
//     other's requests.
//  2. PreFilter: plugins look at the pod once; RuntimeClass rejects a pod
//     whose class is missing and merges the class's scheduling constraints
//     into a copy of the pod.
//  3. Filter: every node runs the filters in order and is out at the first
//     that fails; its reasons are kept for the message.
//  4. Score: the feasible nodes are scored by every score plugin (0-100,
//     weight 1 each by default) and the highest total wins; ties are
//     broken at random. With one feasible node, scoring is skipped.
//  5. Bind: the pod is assumed on the node and bound with store.Bind (the
//     pods/binding semantics: spec.nodeName and PodScheduled=True in one
//     compare-and-swap). A Conflict or NotFound means another party bound or
//     deleted the pod, and it is dropped; other errors retry with backoff.
//
// A pod that fits no node gets the condition PodScheduled=False, reason
// Unschedulable, and kube-scheduler's message ("0/3 nodes are available: 1
// node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu."),
// written only when it differs from the pod's current one, so retries do
// not cause writes. The pod then waits in an unschedulable set until a node
// is added or changes in a way the plugins see (labels, taints,
// unschedulable, capacity, allocatable, Ready), a RuntimeClass is added or
// changes, a bound pod is deleted, finishes or leaves its node, or the
// periodic retry (Config.RetryInterval, 30 s by default) comes. A cluster
// event during a pod's own cycle queues it again at once.
//
// # Plugins
//
// Filters, in order: NodeUnschedulable (spec.unschedulable unless
// tolerated), NodeName (a preset spec.nodeName), NodeReady (the node's Ready
// condition must be True: kube-scheduler relies on the not-ready taint the
// node lifecycle controller sets, orca checks the condition directly),
// RuntimeClass (the node carries runtime.orca.dev/<handler>=true for the
// pod's handler, "runc" when it names no class), NodeAffinity (nodeSelector
// and required node affinity), NodePorts (hostPort conflicts),
// NodeResourcesFit (requests against allocatable minus what the node's pods
// request) and TaintToleration (NoSchedule and NoExecute taints).
//
// Scores: NodeResourcesFit (LeastAllocated), NodeResourcesBalancedAllocation,
// NodeAffinity (preferred terms), TaintToleration (PreferNoSchedule taints)
// and SelectorSpread (fewer pods of the same controller).
package scheduler
