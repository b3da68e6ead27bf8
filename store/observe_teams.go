package store

import (
	"context"
	"time"
)

// The Teams methods of observed (observe.go).

func (o *observed) CreateTeam(ctx context.Context, t *Team) error {
	start := time.Now()
	err := o.Store.CreateTeam(ctx, t)
	o.o.StoreOp("CreateTeam", time.Since(start), err)
	return err
}

func (o *observed) ListTeams(ctx context.Context) ([]*Team, error) {
	start := time.Now()
	v, err := o.Store.ListTeams(ctx)
	o.o.StoreOp("ListTeams", time.Since(start), err)
	return v, err
}

func (o *observed) DeleteTeam(ctx context.Context, name string) error {
	start := time.Now()
	err := o.Store.DeleteTeam(ctx, name)
	o.o.StoreOp("DeleteTeam", time.Since(start), err)
	return err
}

func (o *observed) AddTeamMember(ctx context.Context, team, user string) error {
	start := time.Now()
	err := o.Store.AddTeamMember(ctx, team, user)
	o.o.StoreOp("AddTeamMember", time.Since(start), err)
	return err
}

func (o *observed) RemoveTeamMember(ctx context.Context, team, user string) error {
	start := time.Now()
	err := o.Store.RemoveTeamMember(ctx, team, user)
	o.o.StoreOp("RemoveTeamMember", time.Since(start), err)
	return err
}

func (o *observed) TeamMembers(ctx context.Context, team string) ([]string, error) {
	start := time.Now()
	v, err := o.Store.TeamMembers(ctx, team)
	o.o.StoreOp("TeamMembers", time.Since(start), err)
	return v, err
}

func (o *observed) UserTeams(ctx context.Context, user string) ([]string, error) {
	start := time.Now()
	v, err := o.Store.UserTeams(ctx, user)
	o.o.StoreOp("UserTeams", time.Since(start), err)
	return v, err
}
