// Package testoidc runs a real OpenID Provider for tests: the example
// provider of github.com/zitadel/oidc (example/server: its in-memory
// storage, its keys, its username and password login form, its
// discovery, token and UserInfo endpoints), on a loopback port, with the
// people and the one client a test gives it.
//
// It is not a fake of ours: the sign-in code under test talks to a
// certified OpenID Connect library's provider over real HTTP, and a
// browser test fills its real login form. Only the people and the
// client are ours.
//
// Listen reserves the port first, so the issuer URL is known before the
// server under test is configured with it; Serve then starts the provider
// with the client whose redirect URI that server has. Close (or the
// test's cleanup) stops it and waits for it.
package testoidc

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"golang.org/x/text/language"
)

// User is a person the provider knows.
type User struct {
	// ID is the subject (the ID token's sub).
	ID                  string
	Username, Password  string
	FirstName, LastName string
	Email               string
	EmailVerified       bool
}

// Provider is a running OpenID Provider.
type Provider struct {
	// Issuer is its issuer URL, http://127.0.0.1:PORT/.
	Issuer string
	ln     net.Listener
	srv    *http.Server
	wg     sync.WaitGroup
	once   sync.Once
}

// Listen reserves a loopback port for the provider.
func Listen(t testing.TB) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{Issuer: "http://" + ln.Addr().String() + "/", ln: ln}
	t.Cleanup(p.Close)
	return p
}

// users is the example storage's UserStore over the test's people.
type users map[string]*storage.User

func (u users) GetUserByID(id string) *storage.User { return u[id] }
func (u users) GetUserByUsername(name string) *storage.User {
	for _, x := range u {
		if x.Username == name {
			return x
		}
	}
	return nil
}
func (u users) ExampleClientID() string { return storage.ServiceUserID }

// Serve starts the provider with one web client (client id and secret,
// authenticated by HTTP Basic or the form, PKCE allowed) whose redirect
// URI is redirect, and the people.
func (p *Provider) Serve(t testing.TB, clientID, secret, redirect string, people ...User) {
	t.Helper()
	us := users{}
	for _, x := range people {
		us[x.ID] = &storage.User{ID: x.ID, Username: x.Username, Password: x.Password, FirstName: x.FirstName, LastName: x.LastName,
			Email: x.Email, EmailVerified: x.EmailVerified, PreferredLanguage: language.English}
	}
	st := storage.NewStorageWithClients(us, map[string]*storage.Client{clientID: storage.WebClient(clientID, secret, redirect)})
	router := exampleop.SetupServer(p.Issuer, st, nil, false)
	p.srv = &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	t.Cleanup(p.Close) // before the cleanups registered earlier (a leak check)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		if err := p.srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("the OpenID Provider stopped: %v", err)
		}
	}()
}

// Close stops the provider and waits for it.
func (p *Provider) Close() {
	p.once.Do(func() {
		if p.srv == nil {
			p.ln.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if p.srv.Shutdown(ctx) != nil {
			p.srv.Close()
		}
		p.wg.Wait()
	})
}
