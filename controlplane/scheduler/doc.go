// Package scheduler assigns pods to nodes, as a small kube-scheduler built
// on the same framework ideas (see the framework package).
//
// # The cycle
//
// Informers keep pods, nodes and RuntimeClasses in memory (the
// scheduler's own, or ones shared through Config). A pod waits for this
// scheduler when its spec.nodeName is empty, it is not being deleted and
// its spec.schedulerName is Config.Name ("default-scheduler" by default;
// an empty schedulerName counts as the default). Its "namespace/name" goes
// into a client-go rate-limited work queue, and one goroutine schedules
// one pod at a time:
//
//  1. Snapshot: the informer handlers keep a cache of one
//     framework.NodeInfo per node, updated incrementally: the node, the
//     non-terminal pods bound to it and their summed requests, plus the
//     pods this scheduler assumed on it while their binding is written
//     (kube-scheduler's internal/cache: an assumption is confirmed by the
//     informer's update of the bound pod, forgotten when the binding
//     fails, and dropped 15 minutes after a written binding the informer
//     never showed). Every change gives the NodeInfo a new generation, and
//     the cycle's snapshot copies only the nodes whose generation moved.
//  2. PreFilter: plugins look at the pod once and keep what the filters
//     need in the cycle's framework.CycleState (the pod's requests, its
//     parsed node selectors, its hostPorts, its RuntimeClass); RuntimeClass
//     rejects a pod whose class is missing and merges the class's
//     scheduling constraints into a copy of the pod. A plugin with nothing
//     to check for the pod (NodeAffinity without nodeSelector or required
//     affinity, NodePorts without hostPorts) returns Skip and its filter
//     is left out of the cycle, as in kube-scheduler.
//  3. Filter: the filters run on the nodes, Parallelism (16, as
//     kube-scheduler) goroutines at a time, a node out at the first filter
//     that fails (its reasons are kept for the message), until
//     numFeasibleNodesToFind feasible nodes are found
//     (Config.PercentageOfNodesToScore, kube-scheduler's adaptive default:
//     50% of the nodes minus 1% per 125 nodes, at least 5%, at least 100
//     nodes; every node when there are fewer). Each cycle starts where the
//     previous one stopped, so every node gets its turn.
//  4. Score: pre-scores keep the per-pod part of the scores in the cycle
//     state (or Skip: NodeAffinity without preferred terms, SelectorSpread
//     for a pod without a controller, score 0 everywhere); the feasible nodes are scored in parallel by every score
//     plugin; plugins that compare nodes with each other (NodeAffinity,
//     TaintToleration, SelectorSpread) give raw scores normalised once
//     over the scored nodes (NormalizeScore), so a cycle costs time
//     linear in the number of nodes. Each score is 0-100, weight 1 by
//     default; the highest total wins, ties broken at random. With one
//     feasible node, scoring is skipped.
//  5. Bind: the pod is assumed on the node in the cache, so that the next
//     cycle, which starts at once, sees its requests, and bound in a
//     goroutine of its own with store.Bind (the pods/binding semantics:
//     spec.nodeName and PodScheduled=True in one compare-and-swap), then a
//     Scheduled event is recorded. A failed binding forgets the
//     assumption; a Conflict or NotFound means another party bound or
//     deleted the pod, and it is dropped; other errors queue the pod again
//     with backoff.
//
// When Run's context ends the scheduler stops at once: the cycle in
// progress ends with the context, pods still queued are left Pending (for
// the next leader or start), and bindings in flight end with the context.
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
