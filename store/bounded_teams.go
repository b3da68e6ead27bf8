package store

import "context"

// The Teams methods of bounded (bounded.go).

func (b *bounded) CreateTeam(ctx context.Context, t *Team) error {
	ctx, done := Call(ctx, "CreateTeam")
	return done(b.Store.CreateTeam(ctx, t))
}

func (b *bounded) ListTeams(ctx context.Context) ([]*Team, error) {
	ctx, done := Call(ctx, "ListTeams")
	v, err := b.Store.ListTeams(ctx)
	return v, done(err)
}

func (b *bounded) DeleteTeam(ctx context.Context, name string) error {
	ctx, done := Call(ctx, "DeleteTeam")
	return done(b.Store.DeleteTeam(ctx, name))
}

func (b *bounded) AddTeamMember(ctx context.Context, team, user string) error {
	ctx, done := Call(ctx, "AddTeamMember")
	return done(b.Store.AddTeamMember(ctx, team, user))
}

func (b *bounded) RemoveTeamMember(ctx context.Context, team, user string) error {
	ctx, done := Call(ctx, "RemoveTeamMember")
	return done(b.Store.RemoveTeamMember(ctx, team, user))
}

func (b *bounded) TeamMembers(ctx context.Context, team string) ([]string, error) {
	ctx, done := Call(ctx, "TeamMembers")
	v, err := b.Store.TeamMembers(ctx, team)
	return v, done(err)
}

func (b *bounded) UserTeams(ctx context.Context, user string) ([]string, error) {
	ctx, done := Call(ctx, "UserTeams")
	v, err := b.Store.UserTeams(ctx, user)
	return v, done(err)
}
