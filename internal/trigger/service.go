package trigger

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nexus-run/nexus/internal/abi"
)

// Delivery is a trigger's message for a conversation.
type Delivery struct {
	// ID makes the delivery idempotent (a job's firing: its id and scheduled time).
	ID, Key, Text, Mode, From string
	Target                    Target
	// Origin is where the message comes from: the job or the hook (and the chat a hook's
	// call names).
	Origin abi.Origin
}

// Deliver stores a delivery in the conversation's durable queue and sees that it is
// delivered; it answers the message id and the conversation's canonical key.
type Deliver func(ctx context.Context, d Delivery) (messageID, key string, err error)

// Service fires the jobs of a store and answers its webhooks.
type Service struct {
	Store   JobStore
	Deliver Deliver
	// Claims, in a cluster, picks the one node that delivers each firing of a job; nil: this
	// node delivers every firing it finds due.
	Claims Claimer
	Now    func() time.Time
	Logger *slog.Logger
	// MinInterval is the operator's floor: no job may fire more often (a heartbeat's
	// interval, the shortest gap of a cron schedule); default DefaultMinInterval. It is the
	// gateway's setting (nexus serve --min-trigger-interval), not the API's.
	MinInterval time.Duration

	wakeOnce sync.Once
	wakeCh   chan struct{}
}

func (s *Service) wake() chan struct{} {
	s.wakeOnce.Do(func() { s.wakeCh = make(chan struct{}, 1) })
	return s.wakeCh
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Service) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// Wake makes Run look at the jobs again (one was added or removed).
func (s *Service) Wake() {
	select {
	case s.wake() <- struct{}{}:
	default:
	}
}

// Run fires the jobs at their times until ctx ends, beginning with the runs a stopped
// gateway missed.
func (s *Service) Run(ctx context.Context) {
	if w, ok := s.Store.(JobWatcher); ok {
		// A job added through another node is looked at now, not when this node's timer,
		// set for the jobs it knew, runs out (up to an hour). Watching before the first look,
		// no job falls between the two.
		if err := w.WatchJobs(ctx, s.Wake); err != nil {
			s.logger().Warn("triggers: watch the jobs", "err", err)
		}
	}
	for {
		next, err := s.Tick(ctx, s.now())
		if err != nil {
			s.logger().Warn("triggers", "err", err)
		}
		wait := time.Hour // at most: a clock that jumps is noticed within the hour
		if !next.IsZero() {
			wait = min(wait, max(next.Sub(s.now()), 0))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake():
		case <-t.C:
		}
		t.Stop()
	}
}

// DefaultMinInterval is the floor of a job's interval: a model woken every few seconds is a
// bill, not a schedule.
const DefaultMinInterval = time.Minute

// shortestGap looks for two consecutive firings of sch less than floor apart among those of
// the week after from (a cron expression's pattern repeats within it, days of the month
// aside); ok is false when it finds them, with their gap and the first one's time. It stops
// after gapSamples firings: their average gap, at most a week over that many, is then under
// any floor of a few seconds or more, so one of them was found under it already.
func shortestGap(sch cron.Schedule, from time.Time, floor time.Duration) (gap time.Duration, at time.Time, ok bool) {
	const (
		span       = 8 * 24 * time.Hour
		gapSamples = 20000
	)
	first := sch.Next(from)
	prev := first
	for i := 0; i < gapSamples && !prev.IsZero() && prev.Sub(first) <= span; i++ {
		next := sch.Next(prev)
		if next.IsZero() {
			break
		}
		if d := next.Sub(prev); d < floor {
			return d, prev, false
		}
		prev = next
	}
	return 0, time.Time{}, true
}

func parseSchedule(expr string) (cron.Schedule, error) {
	sch, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, abi.Errorf(abi.CodeInvalidArgument, "", "cron schedule %q: %v", expr, err)
	}
	return sch, nil
}

// nextAfter is the job's first scheduled time after t.
func nextAfter(j Job, t time.Time) (time.Time, error) {
	if j.EveryMs > 0 {
		// Heartbeats keep their phase: every interval from their creation.
		every := time.Duration(j.EveryMs) * time.Millisecond
		created := time.UnixMilli(j.CreatedAt)
		if t.Before(created) {
			return created.Add(every), nil
		}
		n := t.Sub(created)/every + 1
		return created.Add(n * every), nil
	}
	sch, err := parseSchedule(j.Schedule)
	if err != nil {
		return time.Time{}, err
	}
	return sch.Next(t), nil
}

// due is what a job owes at now: the latest scheduled time not after now (zero if none since
// its last run) and how many scheduled times before that one it missed.
func due(j Job, now time.Time) (latest time.Time, missed int, next time.Time, err error) {
	ref := time.UnixMilli(max(j.LastRunAt, j.CreatedAt))
	t, err := nextAfter(j, ref)
	if err != nil {
		return time.Time{}, 0, time.Time{}, err
	}
	if j.EveryMs > 0 && !t.After(now) {
		every := time.Duration(j.EveryMs) * time.Millisecond
		n := int(now.Sub(t) / every)
		latest = t.Add(time.Duration(n) * every)
		next, err = nextAfter(j, latest)
		return latest, n, next, err
	}
	count := 0
	for !t.After(now) {
		latest = t
		count++
		if count > 100000 { // every minute for ten weeks: enough to say "many"
			t = now
		}
		if t, err = nextAfter(j, t); err != nil {
			return time.Time{}, 0, time.Time{}, err
		}
	}
	if count > 0 {
		count--
	}
	return latest, count, t, nil
}

// Tick fires every job due at now (each once, whatever it missed, by its policy) and
// answers when the next one is due (zero: no job).
func (s *Service) Tick(ctx context.Context, now time.Time) (time.Time, error) {
	jobs, err := s.Store.Jobs(ctx)
	if err != nil {
		return time.Time{}, err
	}
	var soonest time.Time
	var errs []string
	for _, j := range jobs {
		latest, missed, next, err := due(j, now)
		if err != nil {
			errs = append(errs, fmt.Sprintf("job %s: %v", j.ID, err))
			continue
		}
		if !latest.IsZero() {
			if now.Sub(latest) > Grace {
				missed++ // this one is late too: missed, not run on time
			}
			if err := s.fire(ctx, j, latest, missed, now.Sub(latest) <= Grace); err != nil {
				errs = append(errs, fmt.Sprintf("job %s: %v", j.ID, err))
			}
		}
		if soonest.IsZero() || next.Before(soonest) {
			soonest = next
		}
	}
	if len(errs) > 0 {
		return soonest, fmt.Errorf("triggers: %s", strings.Join(errs, "; "))
	}
	return soonest, nil
}

// Grace is how late a run may be and still count as run on time; a run later than that
// (the gateway was not running, the machine slept) is missed, and the job's policy says
// what becomes of it.
const Grace = time.Minute

// fire delivers one run of j for the scheduled time at: onTime, or standing for the missed
// runs (missed counts them, this one included when it is late). Under policy skip only an
// on-time run is delivered; the skipped ones are recorded.
func (s *Service) fire(ctx context.Context, j Job, at time.Time, missed int, onTime bool) error {
	if !onTime && j.Missed == MissedSkip {
		s.logger().Info("trigger skipped missed runs", "job", j.ID, "missed", missed)
		return s.Store.RecordRun(ctx, j.ID, Run{At: at.UnixMilli(), Error: fmt.Sprintf("skipped %d missed runs (policy skip)", missed)})
	}
	if onTime && j.Missed == MissedSkip {
		missed = 0 // skipped silently: this run is the schedule's, not a catch-up
	}
	id := fmt.Sprintf("%s_%s_%d", j.Kind, j.ID, at.UnixMilli())
	if s.Claims != nil {
		won, err := s.Claims.Claim(ctx, id)
		if err != nil {
			// Unclaimed, it is not delivered: another node may hold it, and a firing
			// delivered twice is worse than one late (the next tick tries again).
			return fmt.Errorf("claim firing %s: %w", id, err)
		}
		if !won {
			// Another node delivers it; the job's schedule moves on here too, so that this
			// firing is not found due again should that node stop before it records it.
			s.logger().Debug("trigger fired elsewhere", "job", j.ID, "firing", id)
			return s.Store.RecordRun(ctx, j.ID, Run{At: at.UnixMilli(), Elsewhere: true})
		}
	}
	text := s.jobText(j, at, missed)
	msgID, _, err := s.Deliver(ctx, Delivery{ID: id, Key: jobKey(j), Text: text, Mode: j.Mode, From: j.Kind + ":" + j.ID, Target: j.TriggerTarget, Origin: jobOrigin(j)})
	errText := ""
	if err != nil {
		errText = err.Error()
	}
	// A failed delivery whose message is stored (no session could open) still counts as
	// fired: the message waits in the queue for the conversation.
	if rerr := s.Store.RecordRun(ctx, j.ID, Run{At: at.UnixMilli(), Fired: msgID != "", MessageID: msgID, Error: errText}); rerr != nil {
		return rerr
	}
	return err
}

// RunNow fires a job at once (nexus cron run), outside its schedule.
func (s *Service) RunNow(ctx context.Context, id string) (string, string, error) {
	j, err := s.Store.Job(ctx, id)
	if err != nil {
		return "", "", err
	}
	now := s.now()
	msgID, key, err := s.Deliver(ctx, Delivery{ID: fmt.Sprintf("%s_%s_manual_%d", j.Kind, j.ID, now.UnixNano()), Key: jobKey(j),
		Text: s.jobText(j, now, 0), Mode: j.Mode, From: j.Kind + ":" + j.ID, Target: j.TriggerTarget, Origin: jobOrigin(j)})
	if msgID != "" {
		if rerr := s.Store.RecordRun(ctx, j.ID, Run{Fired: true, MessageID: msgID}); rerr != nil && err == nil {
			err = rerr
		}
	}
	return msgID, key, err
}

// key is where a job's messages go: its session, else its own cron conversation.
func jobKey(j Job) string {
	if j.SessionKey != "" {
		return j.SessionKey
	}
	return "agent:" + firstOf(j.Agent, "main") + ":cron:" + j.ID
}

func (s *Service) jobText(j Job, at time.Time, missed int) string {
	var head string
	if j.Kind == KindHeartbeat {
		head = fmt.Sprintf("[heartbeat %s, every %s, at %s", j.ID, time.Duration(j.EveryMs)*time.Millisecond, abi.FormatTime(at))
	} else {
		head = fmt.Sprintf("[cron %s (%s), scheduled %s", j.ID, j.Schedule, abi.FormatTime(at))
	}
	if missed > 0 {
		head += fmt.Sprintf("; %d scheduled runs were missed while the gateway was not running, this run catches up", missed)
	}
	return head + "]\n\n" + j.Message
}

func firstOf(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// HookCall is one webhook request.
type HookCall struct {
	ID string
	// Secret is the bearer secret (Authorization: Bearer, or X-Nexus-Hook-Secret);
	// Signature a GitHub-style X-Hub-Signature-256 ("sha256=" + hex HMAC of the body).
	Secret, Signature string
	// TimedSignature is X-Nexus-Signature: "sha256=" + hex HMAC of "<Timestamp>.<body>",
	// Timestamp (X-Nexus-Timestamp) the Unix time in seconds it was signed at.
	TimedSignature, Timestamp string
	Body                      []byte
	ContentType               string
}

// Replay protection of signed calls. A signature is accepted once: the store remembers it
// (through restarts) for as long as a replay of it could otherwise be accepted.
const (
	// SignatureWindow is how far a timestamped call's time may be from the gateway's clock;
	// its signature is remembered for as long as its time stays in the window.
	SignatureWindow = 5 * time.Minute
	// BodySignatureMemory is how long a signature of the body alone (GitHub's, which signs no
	// time) is remembered: a replay within it is refused, a later one cannot be told apart.
	BodySignatureMemory = 7 * 24 * time.Hour
)

// HookResult is a webhook's answer.
type HookResult struct {
	MessageID  string `json:"messageId"`
	SessionKey string `json:"sessionKey"`
}

// hookBody is a JSON webhook body: the message (else the whole body is) and its mode.
type hookBody struct {
	Message string `json:"message"`
	Mode    string `json:"mode"`
	// Channel, Peer and ChatType name the chat the call relays (route.go).
	Channel  string `json:"channel"`
	Peer     string `json:"peer"`
	ChatType string `json:"chatType"`
}

// CallHook authenticates a webhook request by its hook's secret (compared in constant time;
// an unknown hook and a wrong secret get the same answer) and delivers its body.
func (s *Service) CallHook(ctx context.Context, c HookCall) (HookResult, error) {
	h, secret, ok, err := s.Store.Hook(ctx, c.ID)
	if err != nil {
		return HookResult{}, err
	}
	if !ok {
		secret = "whsec_" + strings.Repeat("0", 64) // the same work for an unknown hook
	}
	good := false
	var sig string // a signed call's, once it checks out: accepted once
	var remember time.Time
	now := s.now()
	switch {
	case c.TimedSignature != "":
		sig = strings.ToLower(c.TimedSignature)
		good = hmac.Equal([]byte(sig), []byte(signature(secret, []byte(c.Timestamp+"."), c.Body)))
		at, err := strconv.ParseInt(c.Timestamp, 10, 64)
		if good && (err != nil || now.Sub(time.Unix(at, 0)).Abs() > SignatureWindow) {
			return HookResult{}, abi.Errorf(abi.CodeAuthenticationInvalid, "", "the call's X-Nexus-Timestamp %q is not within %s of the gateway's clock (%s)", c.Timestamp, SignatureWindow, abi.FormatTime(now))
		}
		remember = time.Unix(at, 0).Add(SignatureWindow)
	case c.Signature != "":
		sig = strings.ToLower(c.Signature)
		good = hmac.Equal([]byte(sig), []byte(signature(secret, c.Body)))
		remember = now.Add(BodySignatureMemory)
	case c.Secret != "":
		good = subtle.ConstantTimeCompare([]byte(c.Secret), []byte(secret)) == 1
	}
	if !ok || !good {
		return HookResult{}, abi.Errorf(abi.CodeAuthenticationInvalid, "", "the hook's secret is missing or wrong")
	}
	if sig != "" {
		// Claimed before the delivery, so that two copies sent at once are not both taken;
		// given back when nothing was delivered, so that the sender's retry works.
		fresh, err := s.Store.ClaimSignature(ctx, h.ID, sig, remember)
		if err != nil {
			return HookResult{}, err
		}
		if !fresh {
			return HookResult{}, abi.Errorf(abi.CodeAuthenticationInvalid, "", "this signed call was accepted before: a replay is refused (sign each call anew, with its X-Nexus-Timestamp)")
		}
	}
	res, err := s.deliverHook(ctx, h, c)
	if res.MessageID == "" && sig != "" {
		if uerr := s.Store.UnclaimSignature(ctx, h.ID, sig); uerr != nil {
			s.logger().Warn("webhook", "hook", h.ID, "err", uerr)
		}
	}
	return res, err
}

// signature is the "sha256=" + hex HMAC-SHA256 of parts with secret.
func signature(secret string, parts ...[]byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		mac.Write(p)
	}
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// deliverHook delivers an authenticated call's message.
func (s *Service) deliverHook(ctx context.Context, h Hook, c HookCall) (HookResult, error) {
	text, mode := string(c.Body), h.Mode
	var b hookBody
	if strings.HasPrefix(strings.TrimSpace(strings.ToLower(c.ContentType)), "application/json") {
		if err := json.Unmarshal(c.Body, &b); err != nil {
			return HookResult{}, abi.Errorf(abi.CodeInvalidArgument, "", "the body is not JSON: %v", err)
		}
		if b.Message != "" {
			text = b.Message
		}
		if b.Mode != "" {
			mode = b.Mode
		}
	}
	if strings.TrimSpace(text) == "" {
		return HookResult{}, abi.Errorf(abi.CodeInvalidArgument, "", "an empty message: send it as the body, or as {\"message\": ...} with Content-Type application/json")
	}
	key, origin, err := routeHook(h, b)
	if err != nil {
		return HookResult{}, err
	}
	msgID, canon, err := s.Deliver(ctx, Delivery{Key: key, Text: "[webhook " + h.ID + "]\n\n" + text, Mode: mode, From: "hook:" + h.ID, Target: h.TriggerTarget, Origin: origin})
	if msgID == "" {
		return HookResult{}, err
	}
	if rerr := s.Store.HookCalled(ctx, h.ID); rerr != nil {
		s.logger().Warn("webhook", "hook", h.ID, "err", rerr)
	}
	if err != nil {
		s.logger().Warn("webhook delivery", "hook", h.ID, "err", err)
	}
	return HookResult{MessageID: msgID, SessionKey: canon}, nil
}

// Jobs lists the jobs with when each fires next.
func (s *Service) Jobs(ctx context.Context) ([]Job, error) {
	jobs, err := s.Store.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	now := s.now()
	for i, j := range jobs {
		if _, _, next, err := due(j, now); err == nil {
			jobs[i].NextRunAt = next.UnixMilli()
		}
	}
	return jobs, nil
}

// AddJob stores a job (held to MinInterval) and wakes the scheduler.
func (s *Service) AddJob(ctx context.Context, j Job) (Job, error) {
	j, err := s.Store.AddJob(ctx, j, s.MinInterval)
	if err != nil {
		return Job{}, err
	}
	if _, _, next, err := due(j, s.now()); err == nil {
		j.NextRunAt = next.UnixMilli()
	}
	s.Wake()
	return j, nil
}

// RemoveJob deletes a job and wakes the scheduler.
func (s *Service) RemoveJob(ctx context.Context, id string) error {
	if err := s.Store.RemoveJob(ctx, id); err != nil {
		return err
	}
	s.Wake()
	return nil
}
