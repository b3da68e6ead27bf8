// Package journal numbers, stores and fans out the events of sessions.
//
// Every event of a session gets the next seq of that session (1, 2, 3, ...:
// never repeated, never skipped), is committed to the store, and only then is
// handed to the session's subscribers: nobody ever sees an event that a
// restart could lose.
//
//	producers (session runners)
//	  │ Append / AppendSync / Flush
//	  ▼
//	seq := next[session]++          under Journal.mu, so seq order = queue order
//	queue (≤ QueueSize entries)     full: Append waits (back-pressure on
//	  │                                   producers, never on subscribers)
//	  ▼
//	writer goroutine ─ takes everything queued (≤ MaxBatch)
//	  │ store.AppendEvents(batch)    one transaction, one fsync (group commit);
//	  │                              fails: retry with backoff, never drop
//	  ▼
//	fan-out (never blocks)  ─► per subscriber: bounded queue (Buffer)
//	  │                            full: drop a live piece;
//	  │                            no room for the rest: cut off (ErrTooSlow)
//	  ▼
//	AppendSync / Flush waiters released
//
//	subscriber pump goroutine (one per Subscription)
//	  replay: store.Events(seq > after), page by page  ─┐
//	  live:   its queue, skipping seq <= last replayed ─┴─► Subscription.C
//
// # Live pieces (live.go)
//
// Token deltas, tool output and terminal bytes (event.Coalescable)
// appended without a waiter take no seq: each is queued as a live piece
// (Live 1, 2, ...; the seq of the session's event before it), handed to
// subscribers and the Publisher in queue order like any event, and not
// stored. The pieces of one stream are stored later as one event with
// the next seq (their payloads joined): when another event of the session
// comes, StoreEvery after the first piece (default 1s), at StoreBytes,
// at Flush and at Close. So a long reply stores a few events instead of
// one per delta, and stored seqs stay gapless. The live exception to
// "nobody sees an event a restart could lose" is these pieces only:
// their content is in the stored event that follows them, and a crash
// loses at most StoreEvery of it per stream (the complete events —
// assistant.message, tool.finished — come after). event/live.go states
// the rules readers rely on.
//
// # Messages with their events
//
// AppendMessage queues an event with a store.Message to store in the same
// transaction (store.AppendEventsWith): the session layer stores a user's
// message and its message.queued event this way, so a crash keeps both or
// neither. The message rides in the event's batch; everything above
// (seqs, order, fan-out, retries) is as for any event.
//
// # Other nodes
//
// With Options.Publisher set, the writer hands each committed batch to it
// after the local fan-out (same goroutine, same order; Publish must not
// block). Package journal/natsbus publishes them on NATS JetStream so that
// a server that does not run a session can follow it live; a publish that
// fails never fails the append, because those readers heal from the
// store. Without a Publisher nothing changes.
//
// # Concurrency rules
//
//   - One writer goroutine per Journal does every store write and every
//     fan-out, so a session's events are stored and delivered in seq order.
//   - Append never waits for a subscriber. It waits only when QueueSize
//     events are queued and not yet taken by the writer (the store is slower
//     than the producers): that is the back-pressure producers must feel.
//   - A subscriber never waits for the writer either: its pump goroutine
//     reads from the store while replaying and from its own queue when live.
//   - Lock order: Journal.mu and Journal.subMu are never held together;
//     subMu may be held while taking a Subscription.mu; nothing is held while
//     calling the store or sending on a channel a consumer reads.
//   - Goroutines: the writer (started by New, ended by Close) and one pump
//     per Subscription (ended by Subscription.Close, its context, Forget,
//     cut-off or Close). Close waits for all of them.
//
// # Replay → live without gap or duplicate
//
// Subscribe registers the subscription for live events first, then its pump
// reads the store from after. An event committed before the registration is
// in the store when the pump reads it; one fanned out after the registration
// is in the live queue; an event in both is dropped from the live side by
// its seq (<= the last one replayed). If the live queue overflows while the
// pump is still replaying (a reconnecting client catching up on a busy
// session), the queue is discarded and the pump replays again from where it
// got to: the store has everything, so this costs reads, not events.
//
// # Slow subscribers
//
// Live, a subscriber's queue holds at most Buffer events (plus those its
// pump has taken and is handing to C). When it is full, a live piece is
// dropped (and a must-deliver event evicts the oldest queued piece first);
// the pump hands out live pieces only at the stored event they follow and
// in the row of their run (1, 2, ... with none missing), so a subscriber
// that lost one, or came while a run was under way, gets the rest of the
// run's content from its stored event, never a text with a hole. Stored
// events are then never dropped: a subscriber's seqs do not skip. With
// StoreEvery < 0 (every piece stored), a stored coalescable event
// (event.Coalescable: text deltas, tool output chunks, terminal bytes) is
// merged into the queued event before it when they are of the same kind and
// stream, or else dropped; a non-coalescable event evicts the oldest queued
// coalescable one. If the queue holds only events that must be delivered,
// the subscriber is cut off: it gets what is queued, then C is closed and
// Err returns ErrTooSlow. The client resubscribes after the last seq it got
// (SSE Last-Event-ID) and replays the rest from the store: it loses nothing
// but coalescable events, and those are rebuilt by the complete events that
// follow them (assistant.message, tool.finished). So seqs seen by one
// subscriber may skip, but only over coalescable events, and only when
// the journal stores every piece.
//
// # Failures
//
// A commit that fails is retried with backoff (logged) until it succeeds
// or Close gives up. Events are never dropped silently: the only events not
// stored are those of a session deleted from the store (ErrDeleted to
// AppendSync and Flush), those whose seq another writer already stored
// (ErrConflict: two journals on one session; the session's counter is
// reloaded from the store), those of a fenced session whose lease another
// node took (store.ErrLeaseLost: see fence.go), and those still queued
// when Close's context ends (Close says how many).
//
// A caller's wait for the store (AppendSync's and AppendMessage's for
// the commit, Flush's, Append's for room in a full queue) ends with its
// context, and also with its context's store budget (store.WithBudget:
// an API request's, harvest serve --store-timeout): a store that does
// not commit in time is then a *store.TimeoutError (ErrUnavailable: the
// API's 503) instead of a request that hangs as long as the store does.
// What was queued stays queued and is committed once the store answers,
// as when the context ends: a client that retries a send with its
// idempotency key finds the message if it was stored.
package journal
