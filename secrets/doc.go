// Package secrets keeps the values a session's environment needs and no
// one should read back: API keys for a repository's setup script, a
// person's npm token. They are stored encrypted, with a key that is not in
// the database, and the API that sets them never shows them again.
//
// # The key
//
// The server key is 32 random bytes in DATA/secret.key (LoadOrCreateKey),
// made with mode 0600 on the server's first start. The server refuses to
// start if the file is readable or writable by its group or others, and
// says which chmod to run. The key is never logged: a Key prints (%v, %#v,
// slog) as its id only. Its id (Key.ID: "k-" and 12 hex digits of a hash
// of the key) is stored with every value, so that a value sealed by another
// key is told apart from a damaged one, and so key rotation can come
// later (it is not done today: a server has one key).
//
// # Encryption
//
// Each value is sealed with AES-256-GCM under a fresh random 96-bit nonce,
// with the secret's identity (its scope and name) as additional data: a
// ciphertext copied to another row (another repository, another name) does
// not decrypt. The stored form is a version byte, the nonce, then the
// sealed value with its tag (Key.Seal).
//
// # Scopes and names
//
// A secret belongs to a scope: "repo:owner/name" (a GitHub repository,
// kept in lower case since GitHub compares names without regard to case)
// or "user:<token id>" (a person's, whose API token is that id; the API
// accepts "user:me" for the caller's own). Its name has the shape of an
// environment variable, ^[A-Z_][A-Z0-9_]{0,127}$, and its value is UTF-8
// text of at most MaxValue bytes without NUL (it becomes an environment
// variable). Only an admin token sets repository secrets; a user token
// sets its own user secrets (package server).
//
// # Use
//
// harvest serve calls Resolve twice: for a GitHub repository's
// environment build (its setup list becomes the setup script's
// environment, masked in the build's log, and a build that leaves one in
// the environment fails), and for each session's box (its session list
// reaches the agent's commands, masked in the session's events). Resolve
// gives the KEY=VALUE lists of a session:
// everything for setup scripts, and the secrets marked Session for the
// session's own environment. A user secret overrides a repository secret
// of the same name (the person's value wins, flag included). A Redactor
// scrubs every known value out of text (events, logs).
//
// # Threat model
//
// Protected: a copy of the database without the key file (a backup, a
// stolen disk image of harvest.db, a store hosted elsewhere) reveals the
// secrets' scopes, names, flags and times, and nothing of their values;
// a value moved or altered in the database fails to decrypt rather than
// reaching the wrong environment. The API never returns a value, and
// neither the server's errors nor its logs contain one.
//
// Not protected: anyone who can read DATA/secret.key and the database —
// root on the host, the server's own user, a backup taking the whole data
// directory — can decrypt everything. A running server holds the key in
// memory, and a session given a secret has it in its environment: code in
// that session (the agent, a setup script) can read it and, egress
// permitting, send it anywhere. Redaction is best effort: a value split
// across two chunks of output, or transformed (base64), is not caught.
package secrets
