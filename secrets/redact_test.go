package secrets

import "testing"

func TestRedactor(t *testing.T) {
	r := NewRedactor("abc", "abcdef", "", "q\"uote\nline", "abc")
	for in, want := range map[string]string{
		"xx abcdef yy":             "xx [secret] yy",
		"abc abcd abcdef":          "[secret] [secret]d [secret]",
		"nothing here":             "nothing here",
		`{"text":"q\"uote\nline"}`: `{"text":"[secret]"}`,
		"raw: q\"uote\nline.":      "raw: [secret].",
		"abcabcdef":                "[secret][secret]",
		"":                         "",
	} {
		if got := r.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	var none *Redactor
	if none.Redact("abc") != "abc" || NewRedactor().Redact("abc") != "abc" {
		t.Error("an empty redactor changed text")
	}
	env := EnvRedactor([]string{"A=one=two", "B=three"}, []string{"C="})
	if got := env.Redact("one=two three C="); got != "[secret] [secret] C=" {
		t.Errorf("EnvRedactor: %q", got)
	}
}
