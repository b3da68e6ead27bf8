package telemetry_test

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is an OTLP/HTTP trace receiver: what a collector's otlp
// receiver does with POST /v1/traces, decoding the request with the
// official protobuf types (go.opentelemetry.io/proto/otlp).
type otlpReceiver struct {
	URL string
	srv *httptest.Server

	mu       sync.Mutex
	spans    []*span
	services map[string]bool
}

// span is a received span with what the tests look at.
type span struct {
	trace, id, parent string
	name              string
	kind              tracepb.Span_SpanKind
	attrs             map[string]string
	status            tracepb.Status_StatusCode
}

func startOTLP(t *testing.T) *otlpReceiver {
	rx := &otlpReceiver{services: map[string]bool{}}
	srv := httptest.NewServer(http.HandlerFunc(rx.serve(t)))
	t.Cleanup(srv.Close)
	rx.URL, rx.srv = srv.URL, srv
	return rx
}

func (rx *otlpReceiver) serve(t *testing.T) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			t.Errorf("the exporter sent %s %s (%s); want POST /v1/traces, application/x-protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Errorf("the export does not decode as an ExportTraceServiceRequest: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rx.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					rx.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					sp := &span{trace: hex.EncodeToString(s.GetTraceId()), id: hex.EncodeToString(s.GetSpanId()),
						parent: hex.EncodeToString(s.GetParentSpanId()), name: s.GetName(), kind: s.GetKind(),
						attrs: map[string]string{}, status: s.GetStatus().GetCode()}
					for _, kv := range s.GetAttributes() {
						sp.attrs[kv.GetKey()] = attrString(kv.GetValue())
					}
					rx.spans = append(rx.spans, sp)
				}
			}
		}
		rx.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}
}

func attrString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}

// received returns the spans received so far.
func (rx *otlpReceiver) received() []*span {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	return append([]*span(nil), rx.spans...)
}

// hangUp closes the exporter's connections (which its Shutdown leaves
// idle): their goroutines end.
func (rx *otlpReceiver) hangUp() { rx.srv.CloseClientConnections() }
