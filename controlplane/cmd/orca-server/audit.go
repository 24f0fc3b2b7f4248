package main

import (
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/orca-edge/orca/controlplane/auth/audit"
)

// defaultAuditLogPath stands for <data-dir>/audit.log in --audit-log-path.
const defaultAuditLogPath = "<data-dir>/audit.log"

// auditOptions are the audit log's and the per-user limits' flags (the
// kube-apiserver's --audit-* names; the per-user bounds are orca's).
type auditOptions struct {
	logPath                       string
	maxSizeMB, maxBackups, maxAge int
	policyFile                    string
	mode                          string
	batchBufferSize               int
	maxInflightPerUser            int
	maxLongRunningPerUser         int
}

func (a *auditOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&a.logPath, "audit-log-path", defaultAuditLogPath,
		`file the audit log (audit.k8s.io/v1 Event JSON lines, mode 0600) is appended to; "-" is standard output; "" turns auditing off`)
	f.IntVar(&a.maxSizeMB, "audit-log-maxsize", 100, "megabytes an audit log file grows to before it is rotated")
	f.IntVar(&a.maxBackups, "audit-log-maxbackup", 3, "rotated audit log files kept (0: all)")
	f.IntVar(&a.maxAge, "audit-log-maxage", 30, "days a rotated audit log file is kept (0: no age limit)")
	f.StringVar(&a.policyFile, "audit-policy-file", "",
		"Kubernetes audit Policy (audit.k8s.io/v1) choosing each request's level; empty: Metadata for every request but health and version checks")
	f.StringVar(&a.mode, "audit-log-mode", audit.ModeBatch,
		`"batch": events are queued in order and written by one goroutine, off the requests' path (a full queue makes requests wait: none is dropped; Ctrl-C writes what is queued); "blocking": each event is written before its request goes on`)
	f.IntVar(&a.batchBufferSize, "audit-log-batch-buffer-size", audit.DefaultBatchBufferSize, "events --audit-log-mode=batch queues at most")
	f.IntVar(&a.maxInflightPerUser, "max-requests-inflight-per-user", 50,
		"API requests one user has in flight at once, on top of --max-requests-inflight (watches and logs are not counted); more get 429")
	f.IntVar(&a.maxLongRunningPerUser, "max-long-running-requests-per-user", 200,
		"watches, log reads and exec/attach/port-forward streams one user has open at once; more get 429")
}

// auditor opens the audit log (nil when --audit-log-path is "").
func (a *auditOptions) auditor(dataDir string) (*audit.Auditor, error) {
	path := a.logPath
	switch path {
	case "":
		return nil, nil
	case defaultAuditLogPath:
		path = filepath.Join(dataDir, "audit.log")
	}
	return audit.New(audit.Options{LogPath: path, MaxSizeMB: a.maxSizeMB, MaxBackups: a.maxBackups, MaxAgeDays: a.maxAge, PolicyFile: a.policyFile,
		Mode: a.mode, BatchBufferSize: a.batchBufferSize})
}
