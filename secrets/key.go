package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// KeyFile is the key's file in the data directory.
const KeyFile = "secret.key"

// KeySize is the key's length in bytes (AES-256).
const KeySize = 32

// version is the first byte of every ciphertext: how the rest is laid out.
const version = 1

// ErrDecrypt is a value that does not decrypt: sealed by another key, or
// altered, or moved to another scope or name. Its value is lost; set it
// again.
var ErrDecrypt = errors.New("the value does not decrypt")

// Key seals and opens values. It never prints its bytes: %v, %#v and slog
// show its id.
type Key struct {
	id   string
	aead cipher.AEAD
}

// NewKey returns the key of raw, which must be KeySize bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("secrets: a key is %d bytes, not %d", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	h := sha256.Sum256(append([]byte("harvest secret key id\x00"), raw...))
	return &Key{id: "k-" + hex.EncodeToString(h[:6]), aead: aead}, nil
}

// GenerateKey returns a new random key.
func GenerateKey() *Key {
	k, err := NewKey(randomKey())
	if err != nil {
		panic(err) // a key of the right size always makes a cipher
	}
	return k
}

func randomKey() []byte {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return raw
}

// ID names the key without revealing it; it is stored with each value.
func (k *Key) ID() string { return k.id }

// String, GoString, LogValue and Format show the key's id, never its
// bytes (value receivers: a Key copied by value is covered too).
func (k Key) String() string             { return "secrets.Key(" + k.id + ")" }
func (k Key) GoString() string           { return k.String() }
func (k Key) LogValue() slog.Value       { return slog.StringValue(k.String()) }
func (k Key) Format(f fmt.State, _ rune) { f.Write([]byte(k.String())) }

// additional is the additional data of a value: its identity.
func additional(scope, name string) []byte {
	return []byte("harvest secret v1\x00" + scope + "\x00" + name)
}

// Seal encrypts the value of the secret scope/name.
func (k *Key) Seal(scope, name string, value []byte) []byte {
	ns := k.aead.NonceSize()
	out := make([]byte, 1+ns, 1+ns+len(value)+k.aead.Overhead())
	out[0] = version
	if _, err := rand.Read(out[1:]); err != nil {
		panic(err) // crypto/rand does not fail on supported systems
	}
	return k.aead.Seal(out, out[1:1+ns], value, additional(scope, name))
}

// Open decrypts a ciphertext of Seal for the secret scope/name; anything
// else (another key, another secret, a changed byte) is ErrDecrypt.
func (k *Key) Open(scope, name string, ciphertext []byte) ([]byte, error) {
	ns := k.aead.NonceSize()
	if len(ciphertext) < 1+ns+k.aead.Overhead() || ciphertext[0] != version {
		return nil, ErrDecrypt
	}
	v, err := k.aead.Open(nil, ciphertext[1:1+ns], ciphertext[1+ns:], additional(scope, name))
	if err != nil {
		return nil, ErrDecrypt
	}
	return v, nil
}

// LoadOrCreateKey reads the key in dir/KeyFile, making it (32 random bytes,
// mode 0600) if there is none; created says it was made now. A key file
// that others may read or write, or of the wrong size, is an error that
// says what to do.
func LoadOrCreateKey(dir string) (k *Key, created bool, err error) {
	path := filepath.Join(dir, KeyFile)
	k, err = loadKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, false, err
	}
	if err := createKey(dir, path); err != nil {
		return nil, false, err
	}
	k, err = loadKey(path)
	return k, err == nil, err
}

func loadKey(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("reading the secret key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the secret key: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("the secret key %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("the secret key %s has mode %04o: others than its owner may read or change it; run: chmod 600 %s", path, perm, path)
	}
	raw, err := io.ReadAll(io.LimitReader(f, KeySize+1))
	if err != nil {
		return nil, fmt.Errorf("reading the secret key: %w", err)
	}
	if len(raw) != KeySize {
		return nil, fmt.Errorf("the secret key %s is not %d bytes: it was damaged or replaced; restore it from a backup (without it the stored secrets cannot be read), or move it away to start with a new key and set every secret again", path, KeySize)
	}
	return NewKey(raw)
}

// createKey writes a new key to path, atomically: to a temporary file
// first, then linked into place (which fails if another process made one
// meanwhile, whose key is then used).
func createKey(dir, path string) error {
	tmp, err := os.CreateTemp(dir, ".secret-key-*")
	if err != nil {
		return fmt.Errorf("making the secret key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err = tmp.Chmod(0o600); err == nil {
		if _, err = tmp.Write(randomKey()); err == nil {
			err = tmp.Sync()
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("making the secret key: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("making the secret key %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
