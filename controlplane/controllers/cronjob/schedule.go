package cronjob

import (
	"time"

	"github.com/robfig/cron/v3"
	batchv1 "k8s.io/api/batch/v1"
)

// parseSchedule parses cj's schedule in its time zone (Kubernetes'
// formatSchedule: "TZ=<timeZone> <schedule>", then cron.ParseStandard).
func parseSchedule(cj *batchv1.CronJob) (cron.Schedule, error) {
	s := cj.Spec.Schedule
	if cj.Spec.TimeZone != nil {
		s = "TZ=" + *cj.Spec.TimeZone + " " + s
	}
	return cron.ParseStandard(s)
}

// mostRecentScheduleTime returns the latest scheduled time in
// (earliest, now], or nil when there is none, and how many scheduled
// times fell in that range, as Kubernetes' mostRecentScheduleTime.
// earliest is status.lastScheduleTime, else creationTimestamp; with
// withDeadline, no earlier than now - startingDeadlineSeconds.
//
// The times are not enumerated one by one (a year's outage of a
// per-minute schedule is 525,600 of them): for a schedule with a regular
// interval the count and the latest time are computed, then checked
// against the schedule, and only an irregular schedule is walked.
func mostRecentScheduleTime(cj *batchv1.CronJob, now time.Time, sched cron.Schedule, withDeadline bool) (*time.Time, int64) {
	earliest := cj.CreationTimestamp.Time
	if cj.Status.LastScheduleTime != nil {
		earliest = cj.Status.LastScheduleTime.Time
	}
	if withDeadline && cj.Spec.StartingDeadlineSeconds != nil {
		if d := now.Add(-time.Duration(*cj.Spec.StartingDeadlineSeconds) * time.Second); d.After(earliest) {
			earliest = d
		}
	}
	t1 := sched.Next(earliest)
	if t1.IsZero() || t1.After(now) {
		return nil, 0
	}
	t2 := sched.Next(t1)
	if t2.IsZero() || t2.After(now) {
		return &t1, 1
	}
	if step := t2.Sub(t1); step >= time.Second {
		n := int64(now.Sub(t1)/step) + 1
		last := t1.Add(time.Duration(n-1) * step)
		// The computed time is right when it is on the schedule and the
		// next one is after now.
		if next := sched.Next(last.Add(-time.Second)); next.Equal(last) && sched.Next(last).After(now) {
			return &last, n
		}
	}
	// Irregular intervals: walk.
	last, n := t2, int64(2)
	for t := sched.Next(t2); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		last, n = t, n+1
	}
	return &last, n
}

// nextScheduleTimeDuration is how long until just after cj's next
// scheduled time (nil when the schedule has none).
func nextScheduleTimeDuration(cj *batchv1.CronJob, now time.Time, sched cron.Schedule) *time.Duration {
	next := sched.Next(now)
	if next.IsZero() {
		return nil
	}
	d := next.Sub(now) + nextScheduleDelta
	return &d
}
