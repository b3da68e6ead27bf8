package llm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-dev/harvest/base/tracing"
)

// Provider is one model API. Implementations make exactly one HTTP attempt per
// call (their SDK's retries disabled), report every failure as an *Error, and
// are safe for concurrent use. Use a Client to get retries.
type Provider interface {
	// Name is the provider's name: "anthropic", "openai", or the name of a
	// configured OpenAI-compatible endpoint.
	Name() string
	// Stream sends req and calls fn (which may be nil) for each streamed delta,
	// synchronously, then returns the assembled response. It returns promptly
	// with ErrCanceled or ErrTimeout when ctx is done.
	Stream(ctx context.Context, req Request, fn func(Event)) (*Response, error)
}

// TokenCounter is implemented by providers that can count a request's input
// tokens without running it (Anthropic's count_tokens).
type TokenCounter interface {
	CountTokens(ctx context.Context, req Request) (int, error)
}

// Client is what callers use: a Provider, the model to ask for, a retry policy
// and a price table. It is safe for concurrent use; its fields must not change
// once it is in use.
type Client struct {
	Provider Provider
	// Model is used when Request.Model is empty.
	Model string
	Retry RetryPolicy
	// Prices prices responses in Cost; nil means DefaultPrices.
	Prices *PriceTable
	// Observer, when set, hears of every Stream (and Complete) call once
	// it has ended, retries included (package telemetry counts them).
	Observer Observer
}

// Observer hears of a Client's model calls. ModelCall runs on the
// caller's goroutine after the call and must return at once.
type Observer interface {
	ModelCall(Call)
}

// Call is one Stream call, with its retries, as an Observer hears of it.
type Call struct {
	// Provider is the provider's name; Model the model asked for.
	Provider, Model string
	Duration        time.Duration
	// Attempts is how many HTTP attempts it took (0: refused before any).
	Attempts int
	// Usage and CostUSD are the response's (zero for a failed call);
	// Priced is false when the price table does not know the model.
	Usage   Usage
	CostUSD float64
	Priced  bool
	// Err is nil, or the *Error the call returned.
	Err error
}

// tracer is this package's tracing scope.
const tracer = "github.com/harvest-dev/harvest/llm"

// String returns "provider/model".
func (c *Client) String() string { return c.Provider.Name() + "/" + c.Model }

// Stream sends req with retries (see the package doc) and streams deltas to fn,
// which may be nil. Errors are *Error; errors.Is works with the Err* kinds.
func (c *Client) Stream(ctx context.Context, req Request, fn func(Event)) (resp *Response, err error) {
	if req.Model == "" {
		req.Model = c.Model
	}
	start := time.Now()
	ctx, span := tracing.Start(ctx, tracer, "chat "+req.Model, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("gen_ai.operation.name", "chat"),
			attribute.String("gen_ai.system", c.Provider.Name()), attribute.String("gen_ai.request.model", req.Model)))
	attempts := 0
	defer func() { c.observe(span, start, req.Model, attempts, resp, err) }()
	if err := req.Validate(); err != nil {
		return nil, &Error{Kind: ErrBadRequest, Provider: c.Provider.Name(), Message: err.Error(), Err: err}
	}
	delivered := false
	if fn != nil {
		user := fn
		fn = func(ev Event) {
			delivered = true
			user(ev)
		}
	}
	err = c.retry(ctx, req, func(ctx context.Context) error {
		var err error
		attempts++
		resp, err = c.Provider.Stream(ctx, req, fn)
		return err
	}, func() bool { return delivered })
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// observe ends a Stream call's span and tells the Observer.
func (c *Client) observe(span trace.Span, start time.Time, model string, attempts int, resp *Response, err error) {
	if c.Observer == nil && !span.IsRecording() {
		return
	}
	call := Call{Provider: c.Provider.Name(), Model: model, Duration: time.Since(start), Attempts: attempts, Err: err}
	if resp != nil {
		call.Usage = resp.Usage
		call.CostUSD, call.Priced = c.Cost(resp)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("harvest.attempts", call.Attempts))
		if resp != nil {
			span.SetAttributes(attribute.String("gen_ai.response.model", resp.Model),
				attribute.Int("gen_ai.usage.input_tokens", resp.Usage.PromptTokens()),
				attribute.Int("gen_ai.usage.output_tokens", resp.Usage.OutputTokens),
				attribute.StringSlice("gen_ai.response.finish_reasons", []string{string(resp.StopReason)}),
				attribute.Float64("harvest.cost_usd", call.CostUSD))
		}
	}
	tracing.End(span, err)
	if c.Observer != nil {
		c.Observer.ModelCall(call)
	}
}

// Complete is Stream without streaming to the caller: it returns the whole
// response. (It streams underneath, which keeps long generations within HTTP
// idle timeouts.)
func (c *Client) Complete(ctx context.Context, req Request) (*Response, error) {
	return c.Stream(ctx, req, nil)
}

// CountTokens returns the input tokens req would use, with retries. Providers
// without a token-counting API return an error wrapping errors.ErrUnsupported.
func (c *Client) CountTokens(ctx context.Context, req Request) (int, error) {
	tc, ok := c.Provider.(TokenCounter)
	if !ok {
		return 0, fmt.Errorf("%s cannot count tokens: %w", c.Provider.Name(), errors.ErrUnsupported)
	}
	if req.Model == "" {
		req.Model = c.Model
	}
	if err := req.Validate(); err != nil {
		return 0, &Error{Kind: ErrBadRequest, Provider: c.Provider.Name(), Message: err.Error(), Err: err}
	}
	var n int
	err := c.retry(ctx, req, func(ctx context.Context) error {
		var err error
		n, err = tc.CountTokens(ctx, req)
		return err
	}, func() bool { return false })
	return n, err
}

// Cost prices a response with the client's price table: by the model the API
// reported, else by the model the client asked for. ok is false when neither
// is priced.
func (c *Client) Cost(resp *Response) (usd float64, ok bool) {
	prices := c.Prices
	if prices == nil {
		prices = DefaultPrices
	}
	if usd, ok := prices.Cost(resp.Model, resp.Usage); ok {
		return usd, true
	}
	return prices.Cost(c.Model, resp.Usage)
}

// retry runs attempt until it succeeds, fails for good, or ctx is done.
// delivered reports whether the caller has seen output, which forbids a retry.
func (c *Client) retry(ctx context.Context, req Request, attempt func(context.Context) error, delivered func() bool) error {
	p := c.Retry.withDefaults()
	name := c.Provider.Name()
	for n := 1; ; n++ {
		err := c.once(ctx, req, attempt)
		if err == nil {
			return nil
		}
		e := asError(err, name)
		if ce := ContextError(ctx, name); ce != nil {
			// The caller's context ended: whatever the attempt saw is a symptom.
			ce.Attempts = n
			return ce
		}
		e.Attempts = n
		if delivered() || !e.Kind.Retryable() || n >= p.MaxAttempts {
			return e
		}
		d, ok := p.Delay(n, e.RetryAfter)
		if !ok {
			e.Message += fmt.Sprintf(" (not retried: the wait is longer than RetryPolicy.MaxRetryAfter, %s)", p.MaxRetryAfter)
			return e
		}
		if p.OnRetry != nil {
			p.OnRetry(RetryInfo{Attempt: n, Err: e, Delay: d})
		}
		if err := p.Sleep(ctx, d); err != nil {
			ce := ContextError(ctx, name)
			if ce == nil {
				ce = &Error{Kind: ErrCanceled, Provider: name, Message: "retry wait interrupted", Err: err}
			}
			ce.Attempts = n
			return ce
		}
	}
}

// once runs one attempt under Request.Timeout.
func (c *Client) once(ctx context.Context, req Request, attempt func(context.Context) error) error {
	if req.Timeout <= 0 {
		return attempt(ctx)
	}
	actx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	err := attempt(actx)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		return &Error{
			Kind: ErrTimeout, Provider: c.Provider.Name(),
			Message: fmt.Sprintf("the attempt took longer than Request.Timeout (%s)", req.Timeout),
			Err:     err,
		}
	}
	return err
}

func asError(err error, provider string) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Kind: ErrServer, Provider: provider, Err: err}
}
