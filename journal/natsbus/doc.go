// Package natsbus carries a session's events between Harvest servers over
// NATS JetStream, so an SSE client connected to one server follows a
// session run by another, live, and resumes (Last-Event-ID) across the
// death of either with nothing missed and nothing repeated.
//
// The store stays the source of truth. NATS is only the fast path: it
// tells other servers, within a round trip, what the store already has.
// Everything below follows from that.
//
//	node B: journal ─ store.AppendEvents (seqs 1, 2, 3, ... per session)
//	          │ then Publisher.Publish (never blocks, never fails the append)
//	          ▼
//	        Bus queue (≤ QueueSize; full: the oldest is dropped, counted)
//	          │ publisher goroutine: PublishMsgAsync, wait for the acks,
//	          │ retry what failed with backoff (same Nats-Msg-Id)
//	          ▼
//	NATS:   stream HARVEST_EVENTS, subjects harvest.events.>, file storage,
//	        de-duplicated by Nats-Msg-Id = <session>/<seq> within Duplicates
//	          │ ordered consumer on harvest.events.<session>
//	          ▼
//	node A: Follower ─ catch-up from the store, then live from NATS;
//	          a gap in seqs is filled from the store; a repeat is dropped
//	          ▼
//	        Follower.C (server/sse.go streams it)
//
// # Ordering, de-duplication, gap healing
//
// A Follower delivers seq after+1, after+2, ... and nothing else: it keeps
// the last seq it delivered and never hands out another unless it is the
// next one. Where that next event comes from does not matter:
//
//   - Catch-up: Follow first creates the session's ordered consumer
//     (deliver new: only what is published from now on), then reads the
//     store after `after`. An event is stored before it is published, so
//     one published before the consumer existed was stored before the
//     store was read: each event is in the read, on the consumer, or both.
//   - Repeats (an event in both; a publish retried after its ack was lost
//     beyond the stream's duplicate window; a consumer recreated after a
//     reconnect) have a seq at or below the last one delivered: dropped.
//     Within the window, NATS drops a re-published Nats-Msg-Id itself.
//   - Gaps (a publish that failed for good, the queue overflowing, a
//     publisher that died between the commit and the publish, NATS losing
//     its storage): the next event that does arrive has a seq past
//     last+1, and the Follower reads the missing ones from the store first.
//   - A lost tail (nothing follows the lost events, or NATS is down): a
//     Follower that hears nothing for HealEvery reads the store after its
//     last seq anyway. So a follower keeps going, more slowly, while NATS
//     is down, and NATS coming back only brings repeats it drops.
//   - NATS down: while the Bus's connection is lost (nats.go's
//     disconnect and reconnect handlers say so), every Follower reads the
//     store at once and then every PollDown (500 ms) instead of
//     HealEvery: one bounded query per follower and PollDown, the
//     polling fallback, and events reach followers about PollDown/2 late
//     on average, at most PollDown plus a store read. Follow does not
//     wait for a consumer while the connection is lost (an event stream
//     would wait PublishTimeout for its headers); the consumer is made
//     in the background once NATS is back. internal/netlab's
//     TestNATSDown measures it on separate machines.
//
// Live pieces (event/live.go: token deltas and the like, which the
// journal delivers live and stores later, joined) are published too, with
// no Nats-Msg-Id (they share their seq with the stored event before them)
// and never retried. A Follower delivers one only when it is at that seq
// and the piece is the next of its run (1, 2, ...), after filling a gap
// up to that seq; anything else is dropped: the stored event that follows
// brings its content. A piece never counts as a gap or a repeat.
//
// So NATS failing costs latency, never events: the append never waits for
// it, and readers fall back on the store.
//
// # Concurrency
//
//   - One publisher goroutine per Bus (started by Connect, ended by Close
//     after it drained the queue or Close's context ended).
//   - Two goroutines per Follower: consume (reads the ordered consumer,
//     recreating it when it fails) hands decoded events to run (catch-up,
//     gap healing, de-duplication, delivery on C) over a small channel, so a
//     slow reader of C holds back the consumer, not the other way round:
//     JetStream keeps what is not pulled yet, nothing is buffered without
//     bound here.
//   - Follower.Close waits for run (C is closed); Bus.Close ends every
//     Follower (ErrClosed) and waits for all their goroutines and the
//     publisher's, then closes the connection.
//   - Bus.mu guards the queue and closing; nothing is held while publishing,
//     reading the store or sending on a channel.
package natsbus
