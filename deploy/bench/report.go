package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Target is an issue 9 target on a figure: Op is ">=" or "<=", Value in
// the figure's unit; OnRatio: the target is on the ratio orca/peer
// instead of the figure itself (the store next to etcd).
type Target struct {
	Op      string  `json:"op"`
	Value   float64 `json:"value"`
	OnRatio bool    `json:"onRatio,omitempty"`
}

// String renders the target as the table shows it (">= 1500", "ratio >= 2").
func (t *Target) String() string {
	if t == nil {
		return "-"
	}
	s := t.Op + " " + formatValue(t.Value)
	if t.OnRatio {
		s = "ratio " + s
	}
	return s
}

// Met reports whether the target holds for value v (the figure, or the
// ratio when OnRatio); ok is false when it cannot be said (no target, or
// no value).
func (t *Target) Met(v float64) (met, ok bool) {
	if t == nil || math.IsNaN(v) {
		return false, false
	}
	switch t.Op {
	case ">=":
		return v >= t.Value, true
	case "<=":
		return v <= t.Value, true
	}
	return false, false
}

// Figure is one row of the table: the per-run samples of one measured
// quantity, their median, and what it is compared with.
type Figure struct {
	// ID is stable across runs and commits ("a.1000.throughput"); the
	// baseline is matched on it.
	ID   string `json:"id"`
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Runs holds one value per run, in run order.
	Runs []float64 `json:"runs"`
	// Median of Runs (NaN, written as null, when there are none).
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Before is the figure at the baseline commit, when it was measured.
	Before *float64 `json:"before,omitempty"`
	// Peer names what the figure is compared with; PeerValue its value
	// (measured in the same run, or a constant: PeerMeasured false).
	Peer         string   `json:"peer,omitempty"`
	PeerValue    *float64 `json:"peerValue,omitempty"`
	PeerMeasured bool     `json:"peerMeasured,omitempty"`
	Target       *Target  `json:"target,omitempty"`
	// Note says how the figure was measured where the name does not
	// (stand-ins, caps, what bounded it).
	Note string `json:"note,omitempty"`
}

// MarshalJSON writes NaN medians as null (encoding/json refuses NaN).
func (f Figure) MarshalJSON() ([]byte, error) {
	type plain Figure
	type out struct {
		plain
		Median *float64 `json:"median"`
		Min    *float64 `json:"min"`
		Max    *float64 `json:"max"`
		Ratio  *float64 `json:"ratio,omitempty"`
		Met    *bool    `json:"met,omitempty"`
	}
	o := out{plain: plain(f), Median: finite(f.Median), Min: finite(f.Min), Max: finite(f.Max)}
	if r := f.Ratio(); !math.IsNaN(r) {
		o.Ratio = &r
	}
	if met, ok := f.Met(); ok {
		o.Met = &met
	}
	return json.Marshal(o)
}

// UnmarshalJSON reads what MarshalJSON wrote (null medians are NaN).
func (f *Figure) UnmarshalJSON(b []byte) error {
	type plain Figure
	var in struct {
		plain
		Median *float64 `json:"median"`
		Min    *float64 `json:"min"`
		Max    *float64 `json:"max"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*f = Figure(in.plain)
	f.Median, f.Min, f.Max = orNaN(in.Median), orNaN(in.Min), orNaN(in.Max)
	return nil
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// Summarize sets Median, Min and Max from Runs.
func (f *Figure) Summarize() {
	f.Median = Median(f.Runs)
	f.Min, f.Max = math.NaN(), math.NaN()
	for i, v := range f.Runs {
		if i == 0 || v < f.Min {
			f.Min = v
		}
		if i == 0 || v > f.Max {
			f.Max = v
		}
	}
}

// Ratio is Median / PeerValue (NaN without a peer value or with a zero one).
func (f *Figure) Ratio() float64 {
	if f.PeerValue == nil || *f.PeerValue == 0 || math.IsNaN(f.Median) {
		return math.NaN()
	}
	return f.Median / *f.PeerValue
}

// Met reports whether the figure meets its target (ok false: no target or
// nothing to judge it on).
func (f *Figure) Met() (met, ok bool) {
	if f.Target == nil {
		return false, false
	}
	if f.Target.OnRatio {
		return f.Target.Met(f.Ratio())
	}
	return f.Target.Met(f.Median)
}

// Median is the middle of vs (the mean of the two middle values for an
// even count); NaN for none. vs is not modified.
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Percentile is the nearest-rank p-th percentile (0 < p <= 100) of
// samples: the smallest sample with at least p% of the samples at or
// below it, as HdrHistogram and wrk report; -1 for no samples (Millis
// makes that NaN). samples is not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return time.Duration(-1)
	}
	s := append([]time.Duration(nil), samples...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return s[rank-1]
}

// Millis is d in milliseconds; NaN for the -1 of Percentile over no samples.
func Millis(d time.Duration) float64 {
	if d < 0 {
		return math.NaN()
	}
	return float64(d) / float64(time.Millisecond)
}

// Report is what one `make bench` writes: the figures and how they were
// measured.
type Report struct {
	Date    time.Time `json:"date"`
	Commit  string    `json:"commit"`
	Short   bool      `json:"short"`
	Runs    int       `json:"runs"`
	Machine string    `json:"machine"`
	// Setup lists how orca-server ran (TLS, audit, fsync) and what stood
	// in for what.
	Setup   []string `json:"setup"`
	Figures []Figure `json:"figures"`
	// Baseline names the file the before column came from.
	Baseline string `json:"baseline,omitempty"`
}

// Find returns the figure with id, or nil.
func (r *Report) Find(id string) *Figure {
	for i := range r.Figures {
		if r.Figures[i].ID == id {
			return &r.Figures[i]
		}
	}
	return nil
}

// ApplyBaseline sets each figure's Before from the figure of the same ID
// in base (its median); a base of the other mode (-short or not, other
// sizes) is not applied.
func (r *Report) ApplyBaseline(base *Report) {
	if base.Short != r.Short {
		return
	}
	for i := range r.Figures {
		if b := base.Find(r.Figures[i].ID); b != nil && !math.IsNaN(b.Median) {
			v := b.Median
			r.Figures[i].Before = &v
		}
	}
}

// WriteJSON writes r, indented, to path (directories created).
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// ReadReport reads a report WriteJSON wrote.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// tableHeader is the table's columns.
var tableHeader = []string{"figure", "before", "orca", "range", "unit", "peer", "peer value", "ratio", "target", "met"}

// WriteTable prints the figures as one aligned table (the columns of
// tableHeader), then each figure's note under it, numbered.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(tableHeader, "\t"))
	var notes []string
	for _, f := range r.Figures {
		name := f.Name
		if f.Note != "" {
			notes = append(notes, f.Note)
			name += fmt.Sprintf(" [%d]", len(notes))
		}
		before := "-"
		if f.Before != nil {
			before = formatValue(*f.Before)
		}
		rng := "-"
		if len(f.Runs) > 1 {
			rng = formatValue(f.Min) + "-" + formatValue(f.Max)
		}
		peer, peerValue := "-", "-"
		if f.Peer != "" {
			peer = f.Peer
			if !f.PeerMeasured && f.PeerValue != nil {
				peer += " (reference, not measured)"
			}
		}
		if f.PeerValue != nil {
			peerValue = formatValue(*f.PeerValue)
		}
		ratio := "-"
		if v := f.Ratio(); !math.IsNaN(v) {
			ratio = strconv.FormatFloat(v, 'f', 2, 64) + "x"
		}
		met := "-"
		if m, ok := f.Met(); ok {
			met = map[bool]string{true: "yes", false: "NO"}[m]
		}
		fmt.Fprintln(tw, strings.Join([]string{name, before, formatValue(f.Median), rng, f.Unit, peer, peerValue, ratio, f.Target.String(), met}, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, n := range notes {
		if _, err := fmt.Fprintf(w, "[%d] %s\n", i+1, n); err != nil {
			return err
		}
	}
	return nil
}

// formatValue renders v with 3 significant digits at most for small
// values and none after the point for large ones ("0.42", "12.3", "1530").
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}
