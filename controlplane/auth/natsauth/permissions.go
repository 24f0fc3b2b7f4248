package natsauth

import (
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/controlplane/store"
)

// User is what a user JWT grants: its name (shown in NATS' monitoring),
// its permissions, the inbox prefix it must use (nats.CustomInboxPrefix;
// its subscriptions are allowed only there) and how long the JWT is valid
// (0: no expiry).
type User struct {
	Name        string
	Permissions jwt.Permissions
	InboxPrefix string
	TTL         time.Duration
}

// Subjects orca uses beyond JetStream's.
const (
	// ControlPlaneInboxPrefix is the control plane's inbox prefix. It is
	// not "_INBOX", whose subjects viewers may subscribe to, so no viewer
	// sees the replies the control plane receives (KV values, relay
	// answers).
	ControlPlaneInboxPrefix = "_ORCA_INBOX"
	// ViewerInboxPrefix is the inbox prefix of viewers: nats.go's and the
	// nats CLI's default.
	ViewerInboxPrefix = "_INBOX"
)

// NodeInboxPrefix is the inbox prefix of node's agent: "_INBOX_<node>",
// the node name escaped as a NATS token (store.EncodeName), so node "a.b"
// ("_INBOX_a_b") never shares a prefix with node "a".
func NodeInboxPrefix(node string) string { return nodeapi.NodeInboxPrefix(node) }

// RelaySubject is where node's agent sends its API requests (the relay,
// served by the apiserver as user system:node:<node>): only that node may
// publish there, so the subject is its identity.
func RelaySubject(node string) string { return nodeapi.RelaySubject(node) }

// Buckets every node reads whole (the Nodes for the pod network's routes,
// as Kubernetes' node authorizer lets a kubelet list and watch every
// Node), and the object stores it fetches WASM modules and pushed images
// from.
var (
	NodeSharedBuckets = []string{store.RuntimeClasses.Bucket(), store.Services.Bucket(), store.Endpoints.Bucket(), store.EndpointSlices.Bucket(), store.Nodes.Bucket()}
	NodeObjectStores  = []string{"wasm-modules", "oci-images"}
	// ViewerHiddenBuckets are the buckets viewers cannot read at all
	// (not even their key names): the Secrets.
	ViewerHiddenBuckets = []string{store.Secrets.Bucket()}
)

// jsAPI is JetStream's API prefix in an account.
const jsAPI = "$JS.API."

// responses lets a user answer each request it receives once within a
// minute (nats-server's allow_responses): replies to the control plane's
// requests and JetStream's flow-control requests of push consumers.
var responses = &jwt.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}

// ControlPlane is the user of orca-server's own components (apiserver,
// scheduler, controllers): every subject of the orca account.
func ControlPlane() User {
	return User{Name: "orca-server", InboxPrefix: ControlPlaneInboxPrefix}
}

// Node is the user of node's agent, with ttl as its expiry (0: none). It may
//   - read the NodePods projection of its own pods only: consumers whose
//     filter is "$KV.nodepods.<node>.>" (or narrower; nats-server checks
//     that the filter in the subject is the consumer's) and direct gets of
//     those keys, never a get by sequence, which could read any key;
//   - read the buckets every node needs (NodeSharedBuckets) and the object
//     stores (NodeObjectStores) whole;
//   - put its own key of the usage bucket (nodeapi.MetricsSubject), no
//     other;
//   - publish to its relay subject (RelaySubject) and to the reply subjects
//     "orca.reply.<node>.>" the control plane gives it for log and stream
//     answers; answer each request it receives once (allow_responses);
//   - subscribe to "orca.node.<node>.>" (requests for it) and its inbox
//     prefix (NodeInboxPrefix) only.
//
// It writes no other KV key and creates no stream: every other read or write
// (Secrets, ConfigMaps, its Node and Lease, pod status) goes through the
// relay, where the apiserver's node authorizer decides.
func Node(node string, ttl time.Duration) User {
	enc := store.EncodeName(node)
	own := "$KV." + store.NodePods.Bucket() + "." + enc + ".>"
	np := "KV_" + store.NodePods.Bucket()
	pub := []string{
		jsAPI + "STREAM.INFO." + np,
		jsAPI + "CONSUMER.CREATE." + np + ".*." + own,
		jsAPI + "CONSUMER.DELETE." + np + ".*",
		jsAPI + "DIRECT.GET." + np + "." + own,
		RelaySubject(node),
		"orca.reply." + enc + ".>",
		nodeapi.MetricsSubject(node), // its own usage sample (kubectl top)
	}
	streams := []string{}
	for _, b := range NodeSharedBuckets {
		streams = append(streams, "KV_"+b)
	}
	for _, o := range NodeObjectStores {
		streams = append(streams, "OBJ_"+o)
	}
	for _, s := range streams {
		pub = append(pub,
			jsAPI+"STREAM.INFO."+s,
			jsAPI+"CONSUMER.CREATE."+s+".>",
			jsAPI+"CONSUMER.DELETE."+s+".*",
			jsAPI+"DIRECT.GET."+s,
			jsAPI+"DIRECT.GET."+s+".>",
		)
	}
	return User{
		Name:        "system:node:" + node,
		InboxPrefix: NodeInboxPrefix(node),
		TTL:         ttl,
		Permissions: jwt.Permissions{
			Pub:  jwt.Permission{Allow: pub},
			Sub:  jwt.Permission{Allow: []string{"orca.node." + enc + ".>", NodeInboxPrefix(node) + ".>"}},
			Resp: responses,
		},
	}
}

// Viewer is the read-only user of people who inspect the cluster with
// `nats kv ls|get|watch` or `nats stream ls`, named name, with ttl as its
// expiry. It reads every KV bucket and object store except
// ViewerHiddenBuckets (Secrets: not their values, not their key names),
// writes nothing, and subscribes only under "_INBOX.". It may delete a
// consumer it knows the name of (the nats CLI deletes its own when done)
// but cannot list consumers, so it cannot find the control plane's
// (random names).
func Viewer(name string, ttl time.Duration) User {
	pub := []string{
		jsAPI + "INFO",
		jsAPI + "STREAM.NAMES",
		jsAPI + "STREAM.LIST",
		jsAPI + "STREAM.INFO.*",
		jsAPI + "CONSUMER.CREATE.*",
		jsAPI + "CONSUMER.CREATE.*.>",
		jsAPI + "CONSUMER.INFO.*.*",
		jsAPI + "CONSUMER.DELETE.*.*",
		jsAPI + "DIRECT.GET.>",
		jsAPI + "STREAM.MSG.GET.*",
	}
	var deny []string
	for _, b := range ViewerHiddenBuckets {
		s := "KV_" + b
		deny = append(deny,
			jsAPI+"STREAM.INFO."+s,
			jsAPI+"CONSUMER.CREATE."+s,
			jsAPI+"CONSUMER.CREATE."+s+".>",
			jsAPI+"CONSUMER.INFO."+s+".*",
			jsAPI+"DIRECT.GET."+s,
			jsAPI+"DIRECT.GET."+s+".>",
			jsAPI+"STREAM.MSG.GET."+s,
		)
	}
	if name == "" {
		name = "viewer"
	}
	return User{
		Name:        fmt.Sprintf("orca-viewer:%s", name),
		InboxPrefix: ViewerInboxPrefix,
		TTL:         ttl,
		Permissions: jwt.Permissions{
			Pub:  jwt.Permission{Allow: pub, Deny: deny},
			Sub:  jwt.Permission{Allow: []string{ViewerInboxPrefix + ".>"}},
			Resp: responses,
		},
	}
}
