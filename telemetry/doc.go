// Package telemetry is how an operator watches harvest serve: Prometheus
// metrics, OpenTelemetry traces, structured logs and the readiness
// checks. It owns every metric family and every decision about labels;
// the packages it watches know nothing of Prometheus.
//
// # Hooks, not imports
//
// Each instrumented package declares a small interface for what it can
// tell, next to the code that knows it, and calls it when there is
// something to tell; harvest serve (internal/cli/servetelemetry.go, the
// composition root) gives them a *Metrics, which implements them all:
//
//	store.Observer      StoreOp(op, d, err)        store.Observe wraps a Store: every method timed
//	sandbox.Observer    BoxOp(backend, op, d, err) sandbox.Observe wraps a Provider: create, recover,
//	                                               stop, destroy, and every command started (exec)
//	llm.Observer        ModelCall(Call)            llm.Client.Observer: the builtin agent's model calls
//	modelproxy.Observer ProxyRequest(Request)      modelproxy.Config.Observer: a box's model calls
//	egress.Observer     EgressRequest(Stats)       egress.Config.Observer
//	ghbot.Observer      Delivery(event, result)    ghbot.HookConfig.Observer: webhooks received, processed
//	session.Observer    TurnEnded(agent, end, d)   session.Config.Observer (and the llm and model proxy
//	                                               observers of the clients and proxies it makes)
//
// What a component can say at any moment is read when Prometheus
// scrapes (Watch): the store's count of sessions by state
// (store.Store.CountSessions, which also sums their disk limits), the
// Manager's Stats (runners, turns running, leases) and DiskUsage (the data
// directory's free space and floor, what this node's session disks were
// promised and hold), the journal's Stats and the warm pools'
// (sandbox.Pooler).
// Counting on the hot paths is an atomic add or a histogram observation
// through a handle made once (BENCHMARKS.md measures what it costs).
//
// Tracing needs no hook: the instrumented packages start spans with the
// OpenTelemetry API from the span in their context (base/tracing),
// which is a no-op until harvest serve gives session.Config.Tracer and
// ghbot.HookConfig.Tracer a provider (NewTracing, from the OTEL_*
// variables). A turn is one trace (session/tracing.go draws it).
//
// # Families
//
// Every label value is from a fixed set (labels.go): registered backend
// and agent names, the price table's model names, results and outcomes
// the packages declare as closed sets, the Store's method names, the
// GitHub events Harvest knows; anything else is "other". No session id,
// user, path or raw error is a label (TestCardinalityBounded).
//
//	harvest_sessions{state}                                gauge     the store's, every node the same
//	harvest_session_runners, harvest_turns_running         gauge     this server's
//	harvest_draining                                       gauge
//	harvest_turns_total{agent,outcome}                     counter   outcome: finished, cancelled, failed
//	harvest_turn_failures_total{agent,kind}                counter   event.FailureKinds
//	harvest_turn_duration_seconds{agent,outcome}           histogram
//	harvest_box_operation_duration_seconds{backend,op}     histogram op: create, recover, stop, destroy, exec
//	harvest_box_operation_failures_total{backend,op}       counter
//	harvest_warm_pool_size, _ready{backend}                gauge
//	harvest_warm_pool_takes_total{backend,result}          counter   hit, miss
//	harvest_model_requests_total{model,via,outcome}        counter   via: client (host), proxy (box)
//	harvest_model_request_duration_seconds{model,via}      histogram
//	harvest_model_tokens_total{model,kind}                 counter   input, output, cache_read, cache_write
//	harvest_model_cost_usd_total{model}                    counter
//	harvest_modelproxy_requests_total{api,result}          counter   ok, refused, upstream_error, failed
//	harvest_egress_requests_total{kind,result}             counter   connect|http; ok, error, denied, unauthorized, busy
//	harvest_egress_bytes_total{direction}                  counter   up, down
//	harvest_webhook_deliveries_total{event,result}         counter   ghbot.DeliveryResults
//	harvest_store_operation_duration_seconds{op}           histogram op: a Store method
//	harvest_store_operation_errors_total{op,error}         counter   not_found, conflict, locked, lease_lost, unavailable, ...
//	harvest_journal_events_stored_total, _commits_total, _commit_retries_total, _subscribers_cut_off_total  counter
//	harvest_journal_queued_events, harvest_journal_subscribers                                             gauge
//	harvest_leases_held                                    gauge
//	harvest_leases_taken_total, _renewed_total, _lost_total, _taken_over_total                             counter
//	harvest_sessions_disk_limit_bytes                      gauge     the store's sessions (every node the same)
//	harvest_disk_promised_bytes, _promised_free_bytes, _allocated_bytes  gauge  this node's session disks
//	harvest_disk_free_bytes, _size_bytes, _floor_bytes     gauge     the data directory's filesystem
//	harvest_build_info{version}                            gauge
//
// and the Go runtime's and the process's (go_*, process_*).
//
// # Goroutines
//
// None of its own. Collectors run on the scraping request's goroutine
// (the store's count with a deadline, StoreTimeout); the tracer
// provider's batch processor is the OpenTelemetry SDK's, stopped by
// Tracing.Shutdown.
package telemetry
