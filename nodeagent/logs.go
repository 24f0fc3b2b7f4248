package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/orca-edge/orca/controlplane/nodeapi"
	"github.com/orca-edge/orca/runtimes/logfile"
)

// Log streaming parameters.
const (
	// logChunk is the largest message of a log stream.
	logChunk = nodeapi.MaxChunk
	// logPoll is how often a followed log file is re-read.
	logPoll = 100 * time.Millisecond
)

// liveLogs tracks the log files of running tasks, so a follower knows
// when no more data will come.
type liveLogs struct {
	mu   sync.Mutex
	live map[string]bool
}

func newLiveLogs() *liveLogs { return &liveLogs{live: map[string]bool{}} }

func (l *liveLogs) started(path string) { l.mu.Lock(); l.live[path] = true; l.mu.Unlock() }
func (l *liveLogs) exited(path string)  { l.mu.Lock(); delete(l.live, path); l.mu.Unlock() }
func (l *liveLogs) isLive(path string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live[path]
}

// logError is an error with the HTTP status the apiserver should return.
type logError struct {
	status int
	msg    string
}

func (e *logError) Error() string { return e.msg }

// serveNodeAPI answers the requests of the node's subjects with one
// subscription (one NATS subscription and one goroutine per node, not one
// per subject): nodeapi.LogRequests on nodeapi.LogsSubject(node) and
// nodeapi.StreamRequests on nodeapi.StreamSubject(node), and
// nodeapi.LocalVolumeDeleteRequests on nodeapi.VolumesSubject(node). Other subjects
// under the node's prefix are ignored.
func (a *Agent) serveNodeAPI(ctx context.Context) (*nats.Subscription, error) {
	logs, streams, volumes := nodeapi.LogsSubject(a.cfg.NodeName), nodeapi.StreamSubject(a.cfg.NodeName), nodeapi.VolumesSubject(a.cfg.NodeName)
	serveStream := a.streamHandler(ctx)
	return a.cfg.NATS.Subscribe(nodeapi.NodeSubjectPrefix(a.cfg.NodeName)+"*", func(m *nats.Msg) {
		if nodeapi.NotARequest(m) {
			return
		}
		switch m.Subject {
		case logs:
			go a.serveLog(ctx, m)
		case streams:
			serveStream(m)
		case volumes:
			go a.serveVolumeDelete(m)
		}
	})
}

// serveLog answers one request with a nodeapi.LogSender: an empty first
// message once the log is found, the log, then Orca-EOF; or an Orca-Error with the status of the failure (503 when the
// agent stops mid-stream). The request's cancel subject ends the stream
// with Orca-EOF.
func (a *Agent) serveLog(ctx context.Context, m *nats.Msg) {
	var req nodeapi.LogRequest
	perr := json.Unmarshal(m.Data, &req)
	send, err := nodeapi.NewLogSender(a.cfg.NATS, m.Reply, req)
	if err != nil {
		a.log.Warn("log request", "pod", req.Namespace+"/"+req.Pod, "err", err)
		return
	}
	if perr != nil {
		_ = send.Fail(400, "bad log request: "+perr.Error())
		return
	}
	agentCtx := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if req.CancelSubject != "" {
		sub, err := a.cfg.NATS.Subscribe(req.CancelSubject, func(*nats.Msg) { cancel() })
		if err == nil {
			defer sub.Unsubscribe()
		}
	}
	path, err := a.logFile(req)
	if err != nil {
		var le *logError
		if !errors.As(err, &le) {
			le = &logError{500, err.Error()}
		}
		_ = send.Fail(le.status, le.msg)
		return
	}
	if err = send.Begin(ctx); err == nil {
		err = a.streamLog(ctx, send, path, req)
	}
	switch {
	case err == nil || (ctx.Err() != nil && agentCtx.Err() == nil): // the whole log, or the requester cancelled
		_ = send.End()
	case agentCtx.Err() != nil:
		_ = send.Fail(503, fmt.Sprintf("node agent %s is stopping", a.cfg.NodeName))
	default:
		a.log.Debug("log stream failed", "path", path, "err", err)
		_ = send.Fail(500, err.Error())
	}
}

// logFile finds the log of the requested container's current (or
// previous) attempt, with the kubelet's errors.
func (a *Agent) logFile(req nodeapi.LogRequest) (string, error) {
	obj, ok := a.nodePods.Get(req.Namespace, req.Pod)
	if !ok {
		return "", &logError{404, fmt.Sprintf("pods %q not found", req.Pod)}
	}
	pod := podFromObj(obj)
	name := req.Container
	if name == "" {
		if len(pod.Spec.Containers) != 1 {
			var names []string
			for _, c := range pod.Spec.Containers {
				names = append(names, c.Name)
			}
			return "", &logError{400, fmt.Sprintf("a container name must be specified for pod %s, choose one of: [%s]", pod.Name, strings.Join(names, " "))}
		}
		name = pod.Spec.Containers[0].Name
	}
	if !hasContainer(pod, name) {
		return "", &logError{404, fmt.Sprintf("container %s is not valid for pod %s", name, pod.Name)}
	}
	dir := filepath.Join(a.podLogDir(pod.Namespace, pod.Name, pod.UID), name)
	attempts := logAttempts(dir)
	switch {
	case req.Previous && len(attempts) < 2:
		return "", &logError{400, fmt.Sprintf("previous terminated container %q in pod %q not found", name, pod.Name)}
	case len(attempts) == 0:
		return "", &logError{400, fmt.Sprintf("container %q in pod %q is waiting to start: ContainerCreating", name, pod.Name)}
	case req.Previous:
		return filepath.Join(dir, strconv.Itoa(attempts[len(attempts)-2])+".log"), nil
	}
	return filepath.Join(dir, strconv.Itoa(attempts[len(attempts)-1])+".log"), nil
}

func hasContainer(pod *corev1.Pod, name string) bool {
	for _, c := range append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...) {
		if c.Name == name {
			return true
		}
	}
	return false
}

// podLogDir is <DataDir>/pods/<ns>_<name>_<uid>, as the kubelet's
// /var/log/pods. A pod name may be 253 bytes, which with the namespace and
// uid passes the 255-byte limit of a file name: the name is then cut to
// what fits (the uid keeps the directory unique).
func (a *Agent) podLogDir(ns, name string, uid types.UID) string {
	const maxFileName = 255
	if over := len(ns) + len(name) + len(uid) + 2 - maxFileName; over > 0 {
		name = name[:len(name)-over]
	}
	return filepath.Join(a.podsDir(), ns+"_"+name+"_"+string(uid))
}

// removeOrphanLogs removes the log directories of pods no longer on the
// node (deleted while the agent was down).
func (a *Agent) removeOrphanLogs() {
	live := map[string]bool{}
	for _, o := range a.nodePods.List("", nil) {
		live[filepath.Base(a.podLogDir(o.GetNamespace(), o.GetName(), o.GetUID()))] = true
	}
	ents, _ := os.ReadDir(a.podsDir())
	for _, e := range ents {
		if e.IsDir() && !live[e.Name()] {
			if err := os.RemoveAll(filepath.Join(a.podsDir(), e.Name())); err != nil {
				a.log.Warn("remove logs of a pod no longer on this node", "dir", e.Name(), "err", err)
			}
		}
	}
}

// logAttempts returns the attempt numbers of the "<n>.log" files in dir, ascending.
func logAttempts(dir string) []int {
	ents, _ := os.ReadDir(dir)
	var out []int
	for _, e := range ents {
		n, err := strconv.Atoi(strings.TrimSuffix(e.Name(), ".log"))
		if err == nil && strings.HasSuffix(e.Name(), ".log") {
			out = append(out, n)
		}
	}
	sort.Ints(out)
	return out
}

// streamLog sends the container log at path and the files rotated from
// it (runtimes/logfile's Reader: the rotated files' content, oldest first,
// then the current file's), from the start of the last TailLines lines
// across them, as the kubelet's ReadLogs does: records in the CRI format
// become their content, prefixed with the record's time for Timestamps;
// records before SinceTime are skipped; lines that are not records pass
// through as they are. For Follow it keeps reading new records, into the
// new file after a rotation, until the task exited and the file is
// drained. It returns ctx's error when ctx ends first. Output is sent in
// chunks of at most logChunk bytes (flow-controlled by send), and stops
// after LimitBytes.
func (a *Agent) streamLog(ctx context.Context, send *nodeapi.LogSender, path string, req nodeapi.LogRequest) error {
	f, err := logfile.OpenReader(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if req.TailLines > 0 {
		if err := seekTail(f, req.TailLines); err != nil {
			return err
		}
	}
	out := logOutput{ctx: ctx, send: send, remaining: req.LimitBytes}
	r := bufio.NewReaderSize(f, logChunk)
	var pending []byte // a record not yet ended by its newline
	follow := req.Follow && !req.Previous
	for {
		live := a.logs.isLive(path) // before reading: data written before exit is read below
		for {
			line, err := r.ReadSlice('\n')
			if err == bufio.ErrBufferFull || (err == io.EOF && len(line) > 0) {
				pending = append(pending, line...)
				if err == io.EOF {
					break // wait for the rest of the record
				}
				continue
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if len(pending) > 0 {
				line = append(pending, line...)
				pending = pending[:0]
			}
			if done, err := out.record(line, req); done || err != nil {
				return err
			}
		}
		if !follow || !live {
			if len(pending) > 0 { // a last record cut short: send what there is
				if _, err := out.record(pending, req); err != nil {
					return err
				}
			}
			return out.flush(true)
		}
		if err := out.flush(true); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(logPoll):
		}
	}
}

// logOutput batches log bytes into messages of logChunk bytes.
type logOutput struct {
	ctx       context.Context
	send      *nodeapi.LogSender
	buf       []byte
	remaining int64 // bytes still allowed when limiting (LimitBytes > 0)
	midLine   bool  // the last record sent was partial: no timestamp before the next
}

// record appends one file line; done reports that LimitBytes was reached.
func (o *logOutput) record(line []byte, req nodeapi.LogRequest) (done bool, err error) {
	var text []byte
	rec, perr := logfile.ParseLine(line)
	switch {
	case perr != nil: // not a record: pass it through
		text = line
		o.midLine = false
	case req.SinceTime != nil && rec.Time.Before(*req.SinceTime):
		return false, nil
	default:
		if req.Timestamps && !o.midLine {
			text = append(text, rec.Time.Format(time.RFC3339Nano)...)
			text = append(text, ' ')
		}
		text = append(text, rec.Content...)
		if !rec.Partial {
			text = append(text, '\n')
		}
		o.midLine = rec.Partial
	}
	if req.LimitBytes > 0 {
		if int64(len(text)) >= o.remaining {
			text = text[:o.remaining]
			done = true
		}
		o.remaining -= int64(len(text))
	}
	o.buf = append(o.buf, text...)
	return done, o.flush(done)
}

// flush sends the full chunks buffered, and with all the rest too.
func (o *logOutput) flush(all bool) error {
	n := len(o.buf)
	if !all {
		n -= n % logChunk
	}
	if n == 0 {
		return nil
	}
	err := o.send.Send(o.ctx, o.buf[:n])
	o.buf = append(o.buf[:0], o.buf[n:]...)
	return err
}

// seekTail positions r at the start of the last n lines of the log, which
// may begin in a rotated file.
func seekTail(r *logfile.Reader, n int64) error {
	files := r.Files()
	for i := len(files) - 1; i >= 0; i-- {
		off, err := tailOffset(files[i], n)
		if err != nil {
			return err
		}
		if off > 0 || i == 0 {
			return r.StartAt(i, off)
		}
		lines, err := countLines(files[i])
		if err != nil {
			return err
		}
		if lines >= n {
			return r.StartAt(i, 0)
		}
		n -= lines
	}
	return nil
}

// countLines counts the lines of f (a final line without newline counts).
func countLines(f *os.File) (int64, error) {
	buf := make([]byte, 32<<10)
	var lines int64
	var last byte = '\n'
	for off := int64(0); ; {
		k, err := f.ReadAt(buf, off)
		lines += int64(bytes.Count(buf[:k], []byte{'\n'}))
		if k > 0 {
			last = buf[k-1]
		}
		off += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if last != '\n' {
		lines++
	}
	return lines, nil
}

// tailOffset returns the offset of the start of the last n lines of f (a
// final line without newline counts as a line), reading backwards.
func tailOffset(f *os.File, n int64) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	pos := size
	buf := make([]byte, 8192)
	var lines int64
	first := true
	for pos > 0 {
		step := min(int64(len(buf)), pos)
		pos -= step
		if _, err := f.ReadAt(buf[:step], pos); err != nil && err != io.EOF {
			return 0, err
		}
		chunk := buf[:step]
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] != '\n' {
				continue
			}
			if first && pos+int64(i) == size-1 {
				continue // the file's final newline ends the last line
			}
			lines++
			if lines == n {
				return pos + int64(i) + 1, nil
			}
		}
		first = false
	}
	return 0, nil
}
