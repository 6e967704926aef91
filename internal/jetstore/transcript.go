package jetstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nexus-run/nexus/internal/abi"
	"github.com/nexus-run/nexus/internal/conversation"
)

// Transcripts is conversation.Replica on a stream: a transcript's lines are the messages of
// its subject, one line a message, in order. An append names the subject's last sequence
// (Nats-Expected-Last-Subject-Sequence), so two writers never interleave their lines.
type Transcripts struct {
	js      jetstream.JetStream
	st      jetstream.Stream
	stream  string
	subject string
	max     int // the longest line a message holds
}

var (
	_ conversation.Replica     = (*Transcripts)(nil)
	_ conversation.LineLimiter = (*Transcripts)(nil)
)

// hdrLine carries a random token per append: an append whose acknowledgement was lost is
// recognised as stored when the subject's last message carries it.
const hdrLine = "Nexus-Line"

// TranscriptNames returns the stream and subject prefix of cluster's transcripts.
func TranscriptNames(cluster string) (stream, subject string) {
	return "NEXUS_" + cluster + "_TRANSCRIPTS", "nexus." + cluster + ".transcripts"
}

// TranscriptOptions configure OpenTranscripts.
type TranscriptOptions struct {
	// Cluster and Replicas as in Options.
	Cluster  string
	Replicas int
}

// Transcripts opens the cluster's transcript stream on the store's connection.
func (s *Store) Transcripts(ctx context.Context) (*Transcripts, error) {
	return openTranscripts(ctx, s.js, s.nc, TranscriptOptions{Cluster: s.opt.Cluster, Replicas: s.opt.Replicas})
}

// OpenTranscripts opens (creating when needed) the cluster's transcript stream on nc.
func OpenTranscripts(ctx context.Context, nc *nats.Conn, opt TranscriptOptions) (*Transcripts, error) {
	js, err := clusterJS(nc, &opt.Cluster, &opt.Replicas)
	if err != nil {
		return nil, err
	}
	return openTranscripts(ctx, js, nc, opt)
}

func openTranscripts(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, opt TranscriptOptions) (*Transcripts, error) {
	t := &Transcripts{js: js}
	t.stream, t.subject = TranscriptNames(opt.Cluster)
	// Room for the subject and the header within the server's largest message.
	t.max = int(nc.MaxPayload()) - 8<<10
	if t.max < 4<<10 {
		return nil, fmt.Errorf("transcript stream %s: the server's largest message, %d bytes, is too small", t.stream, nc.MaxPayload())
	}
	// Every line is kept (a transcript is the conversation itself); reads go to the leader,
	// which has every acknowledged line.
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              t.stream,
		Subjects:          []string{t.subject + ".>"},
		Storage:           jetstream.FileStorage,
		Replicas:          opt.Replicas,
		MaxMsgsPerSubject: -1,
		Discard:           jetstream.DiscardOld,
		AllowDirect:       false,
	})
	if err != nil {
		return nil, fmt.Errorf("transcript stream %s: %w", t.stream, err)
	}
	t.st = st
	return t, nil
}

// MaxLine implements conversation.LineLimiter: the longest line a message holds.
func (t *Transcripts) MaxLine() int { return t.max }

// subjectOf is key's subject: the key base64url-encoded, so any key is one token.
func (t *Transcripts) subjectOf(key string) string {
	return t.subject + "." + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// Append implements conversation.Replica: after is the stream sequence of the subject's last
// message (0: none), and the line's position is its stream sequence. A line longer than the
// server's largest message is refused (a transcript entry of a megabyte: pi's own limits on
// tool output keep them far below).
func (t *Transcripts) Append(ctx context.Context, key string, after uint64, line []byte) (uint64, error) {
	if len(line) > t.max {
		return 0, abi.Errorf(abi.CodeLimitExceeded, "", "a transcript line of %d bytes is over the cluster's largest message (%d bytes)", len(line), t.max)
	}
	subj := t.subjectOf(key)
	tok := token()
	msg := &nats.Msg{Subject: subj, Data: line, Header: nats.Header{hdrLine: []string{tok}}}
	for attempt := 1; ; attempt++ {
		ack, err := try(ctx, func(ctx context.Context) (*jetstream.PubAck, error) {
			return t.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(after))
		})
		if err == nil {
			return ack.Sequence, nil
		}
		// A try whose answer was lost may have stored the line: then the next try was
		// refused, or timed out too. The subject's last message says.
		last, lerr := try(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return t.st.GetLastMsgForSubject(ctx, subj)
		})
		if lerr == nil && last.Header.Get(hdrLine) == tok {
			return last.Sequence, nil
		}
		// Refused while the subject is still at after: the leader refused it against a
		// write it had not applied (as updateFrom): tried again.
		if conflict(err) && lerr == nil && last.Sequence == after && attempt < maxAttempts {
			continue
		}
		if conflict(err) {
			return 0, fmt.Errorf("transcript %s: append after %d: %w", key, after, conversation.ErrReplicaConflict)
		}
		return 0, fmt.Errorf("transcript %s: append: %w", key, err)
	}
}

// Purge implements conversation.Purger: the transcript's subject loses every line.
func (t *Transcripts) Purge(ctx context.Context, key string) error {
	_, err := try(ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, t.st.Purge(ctx, jetstream.WithPurgeSubject(t.subjectOf(key)))
	})
	if err != nil {
		return fmt.Errorf("transcript %s: purge: %w", key, err)
	}
	return nil
}

// Tail implements conversation.Replica: the subject's message count and last sequence.
func (t *Transcripts) Tail(ctx context.Context, key string) (int, uint64, error) {
	subj := t.subjectOf(key)
	last, err := try(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
		return t.st.GetLastMsgForSubject(ctx, subj)
	})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("transcript %s: its last line: %w", key, err)
	}
	info, err := try(ctx, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		return t.st.Info(ctx, jetstream.WithSubjectFilter(subj))
	})
	if err != nil {
		return 0, 0, fmt.Errorf("transcript %s: count its lines: %w", key, err)
	}
	return int(info.State.Subjects[subj]), last.Sequence, nil // #nosec G115 -- a count of lines fits an int
}

// fetchBatch is how many lines a read asks the stream for at once.
const fetchBatch = 256

// Lines implements conversation.Replica: an ordered consumer on the subject, read up to the
// last message the leader had when the read began.
func (t *Transcripts) Lines(ctx context.Context, key string) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		subj := t.subjectOf(key)
		last, err := try(ctx, func(ctx context.Context) (*jetstream.RawStreamMsg, error) {
			return t.st.GetLastMsgForSubject(ctx, subj)
		})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		if err != nil {
			yield(nil, fmt.Errorf("transcript %s: its last line: %w", key, err))
			return
		}
		cons, err := try(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return t.js.OrderedConsumer(ctx, t.stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subj}, InactiveThreshold: 30 * time.Second})
		})
		if err != nil {
			yield(nil, fmt.Errorf("transcript %s: read it: %w", key, err))
			return
		}
		var seen uint64
		progress := time.Now()
		for seen < last.Sequence {
			n, err := t.fetch(ctx, cons, last.Sequence, &seen, yield)
			switch {
			case errors.Is(err, errYieldStop):
				return
			case err != nil:
				yield(nil, fmt.Errorf("transcript %s: read it: %w", key, err))
				return
			case n > 0:
				progress = time.Now()
			case time.Since(progress) > ackWait:
				yield(nil, fmt.Errorf("transcript %s: nothing read for %v before line %d: %w", key, ackWait, last.Sequence, errStalled))
				return
			default:
				// A consumer just made on another server may not be known here yet
				// (no responders): it is asked again after a moment.
				select {
				case <-ctx.Done():
					yield(nil, ctx.Err())
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
}

// errYieldStop: the reader of Lines stopped.
var errYieldStop = errors.New("the reader stopped")

// fetch gives one batch of the consumer's messages to yield, up to the sequence last, and
// returns how many it gave. A fetch that found no responder gives none, with no error; one
// whose server went is left after ackWait (its channel would never close).
func (t *Transcripts) fetch(ctx context.Context, cons jetstream.Consumer, last uint64, seen *uint64, yield func([]byte, error) bool) (int, error) {
	batch, err := cons.Fetch(fetchBatch, jetstream.FetchMaxWait(ackWait/2))
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, nil
	}
	if err != nil {
		return 0, err //nolint:wrapcheck // Lines names the transcript
	}
	stall := time.NewTimer(ackWait)
	defer stall.Stop()
	msgs := batch.Messages()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-stall.C:
			return n, errStalled
		case m, ok := <-msgs:
			if !ok {
				if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, nats.ErrNoResponders) {
					return n, err //nolint:wrapcheck // Lines names the transcript
				}
				return n, nil
			}
			md, err := m.Metadata()
			if err != nil {
				return n, err //nolint:wrapcheck // Lines names the transcript
			}
			n++
			*seen = md.Sequence.Stream
			if !yield(m.Data(), nil) {
				return n, errYieldStop
			}
			if *seen >= last {
				return n, nil
			}
		}
	}
}
