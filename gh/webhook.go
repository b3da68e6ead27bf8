package gh

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/harvest-dev/harvest/wire"
)

// MaxWebhookBytes is the largest delivery accepted: GitHub caps payloads
// at 25 MB.
const MaxWebhookBytes = 25 << 20

// Delivery is a webhook delivery whose signature checked out.
type Delivery struct {
	// ID is X-GitHub-Delivery (a GUID; a redelivery keeps it).
	ID string
	// Event is X-GitHub-Event (issue_comment, pull_request, ...).
	Event string
	// Payload is the body, exactly as signed.
	Payload []byte
}

// Errors of ReadDelivery beyond a malformed delivery (400).
var (
	// ErrSignature: the signature is missing or wrong (401).
	ErrSignature = errors.New("the delivery's X-Hub-Signature-256 does not match the webhook secret")
	// ErrTooLarge: the body is over MaxWebhookBytes (413).
	ErrTooLarge = fmt.Errorf("the delivery is larger than %d bytes", MaxWebhookBytes)
	// ErrContentType: the body is not JSON (415).
	ErrContentType = errors.New("the delivery is not application/json: set the webhook's content type to application/json")
)

// ReadDelivery reads and checks a webhook request: a JSON body of at most
// MaxWebhookBytes whose X-Hub-Signature-256 is the HMAC-SHA256 of the body
// under secret (compared in constant time; the SHA-1 X-Hub-Signature is
// not accepted), with the event and delivery headers GitHub sends. An
// error wrapping ErrSignature is an authentication failure (401); any
// other is a bad request (400).
func ReadDelivery(r *http.Request, secret []byte) (Delivery, error) {
	if len(secret) == 0 {
		return Delivery{}, fmt.Errorf("%w: the server has no webhook secret configured (--github-webhook-secret-file)", ErrSignature)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxWebhookBytes+1))
	if err != nil {
		return Delivery{}, fmt.Errorf("reading the delivery: %w", err)
	}
	if len(body) > MaxWebhookBytes {
		return Delivery{}, ErrTooLarge
	}
	// The signature first: nothing else about an unsigned request is told.
	if err := CheckSignature(r.Header.Get("X-Hub-Signature-256"), body, secret); err != nil {
		return Delivery{}, err
	}
	d := Delivery{ID: r.Header.Get("X-GitHub-Delivery"), Event: r.Header.Get("X-GitHub-Event"), Payload: body}
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return Delivery{}, fmt.Errorf("Content-Type %q: %w", r.Header.Get("Content-Type"), ErrContentType)
	}
	var errs []error
	if !wire.ValidDeliveryID(d.ID) {
		errs = append(errs, fmt.Errorf("X-GitHub-Delivery %q: want a delivery GUID", d.ID))
	}
	if d.Event == "" || strings.ContainsAny(d.Event, " /\r\n") || len(d.Event) > 64 {
		errs = append(errs, fmt.Errorf("X-GitHub-Event %q: want an event name", d.Event))
	}
	return d, errors.Join(errs...)
}

// CheckSignature checks a X-Hub-Signature-256 value ("sha256=HEX") for body
// in constant time.
func CheckSignature(sig string, body, secret []byte) error {
	hexSum, ok := strings.CutPrefix(sig, "sha256=")
	if !ok {
		if sig == "" {
			return fmt.Errorf("%w: it is missing", ErrSignature)
		}
		return fmt.Errorf("%w: want sha256=HEX", ErrSignature)
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return fmt.Errorf("%w: want sha256=HEX", ErrSignature)
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	if !hmac.Equal(got, m.Sum(nil)) {
		return ErrSignature
	}
	return nil
}

// Sign is the X-Hub-Signature-256 value GitHub sends for body.
func Sign(body, secret []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}
