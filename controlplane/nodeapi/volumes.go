package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
)

// AnnLocalStoragePath on a Node is the directory its agent keeps
// local-path PersistentVolumes under (the agent's
// --default-local-storage-path, default <data-dir>/storage); the
// local-path provisioner makes volumes of that node there unless
// orca-server's --default-local-storage-path says otherwise.
const AnnLocalStoragePath = "storage.orca.dev/local-path"

// VolumesSubject is the subject node agents serve local volume requests
// on: "orca.node.<node>.volumes". The PV controller sends one
// LocalVolumeDeleteRequest there before it deletes a local-path PV whose
// reclaim policy is Delete, as rancher's local-path-provisioner runs its
// helper pod on the volume's node.
func VolumesSubject(node string) string { return NodeSubjectPrefix(node) + "volumes" }

// LocalVolumeDeleteRequest asks node's agent to remove the directory it
// made for PersistentVolume Volume (at Path). The agent removes only a
// directory it made itself for that volume (it keeps a record of each),
// so a request naming anything else removes nothing and succeeds.
type LocalVolumeDeleteRequest struct {
	Volume string `json:"volume"`
	Path   string `json:"path"`
}

// LocalVolumeDeleteReply is the agent's answer: Error is empty on success.
type LocalVolumeDeleteReply struct {
	Error string `json:"error,omitempty"`
}

// DeleteLocalVolume sends req to node's agent and waits for its answer
// (until ctx ends). It fails when no agent serves the node ("no
// responders": the node is down), on a timeout, or with the agent's error.
// The reply comes on a ReplyInbox(node) subject, the only one a node may
// publish its answers to.
func DeleteLocalVolume(ctx context.Context, nc *nats.Conn, node string, req LocalVolumeDeleteRequest) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	inbox := ReplyInbox(node)
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishMsg(&nats.Msg{Subject: VolumesSubject(node), Reply: inbox, Data: data}); err != nil {
		return err
	}
	m, err := sub.NextMsgWithContext(ctx)
	if err != nil {
		return fmt.Errorf("node %s did not answer: %w", node, err)
	}
	if m.Header.Get("Status") == "503" {
		return fmt.Errorf("node %s: no agent answers (%w)", node, nats.ErrNoResponders)
	}
	var rep LocalVolumeDeleteReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		return fmt.Errorf("node %s: bad reply: %w", node, err)
	}
	if rep.Error != "" {
		return errors.New(rep.Error)
	}
	return nil
}
