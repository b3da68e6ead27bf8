package tools

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// TodoStatus is the state of one todo item.
type TodoStatus string

const (
	TodoPending    TodoStatus = "pending"
	TodoInProgress TodoStatus = "in_progress"
	TodoCompleted  TodoStatus = "completed"
)

// TodoItem is one entry of the agent's todo list.
type TodoItem struct {
	Content string     `json:"content"`
	Status  TodoStatus `json:"status"`
	// ActiveForm is the item in the present continuous ("Running the
	// tests"), shown while it is in progress.
	ActiveForm string `json:"activeForm,omitempty"`
}

// Todos returns the current todo list (a copy), for the loop to emit.
func (e *Env) Todos() []TodoItem {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.todos)
}

// SetTodos restores a todo list saved with the conversation (the agent's
// State), checked like the todo tool checks the model's.
func (e *Env) SetTodos(items []TodoItem) error {
	in := todoInput{Todos: items}
	if msg := in.validate(e); msg != "" {
		return fmt.Errorf("tools: todo list: %s", msg)
	}
	e.mu.Lock()
	e.todos = slices.Clone(items)
	e.mu.Unlock()
	return nil
}

type todoInput struct {
	Todos []TodoItem `json:"todos"`
}

// maxTodoContent caps one item's text.
const maxTodoContent = 500

var todoTool = &builtin[todoInput]{
	name: "todo",
	description: `Keep a todo list for the current task, visible to the people watching. Send the whole list every time (it replaces the previous one): each item has content, status (pending, in_progress or completed) and optionally activeForm ("Running the tests").
Use it for tasks with several steps: write the plan as pending items, mark one in_progress before you start it and completed as soon as it is done; add items you discover. Skip it for trivial one-step tasks.`,
	schema: schema(
		field{name: "todos", typ: "array", required: true, desc: "The complete, updated todo list.", items: map[string]any{
			"type": "object",
			"properties": map[string]any{
				"content":    map[string]any{"type": "string", "description": "What to do, in the imperative (\"Run the tests\")."},
				"status":     map[string]any{"type": "string", "enum": []string{"pending", "in_progress", "completed"}},
				"activeForm": map[string]any{"type": "string", "description": "The same in the present continuous (\"Running the tests\")."},
			},
			"required":             []string{"content", "status"},
			"additionalProperties": false,
		}},
	),
	// The list is the agent's own notes, not the workspace: allowed in plan
	// mode, and safe to run alongside other tools (the Env serialises it).
	readOnly: true,
	run:      runTodo,
}

func (in *todoInput) validate(env *Env) string {
	if n := env.Limits().TodoItems; len(in.Todos) > n {
		return fmt.Sprintf("the list has %d items; at most %d are allowed. Merge or drop some", len(in.Todos), n)
	}
	for i, t := range in.Todos {
		switch {
		case strings.TrimSpace(t.Content) == "":
			return fmt.Sprintf("item %d has no content", i+1)
		case len(t.Content) > maxTodoContent:
			return fmt.Sprintf("item %d is %d bytes; keep items under %d bytes", i+1, len(t.Content), maxTodoContent)
		case len(t.ActiveForm) > maxTodoContent:
			return fmt.Sprintf("the activeForm of item %d is %d bytes; keep it under %d bytes", i+1, len(t.ActiveForm), maxTodoContent)
		}
		switch t.Status {
		case TodoPending, TodoInProgress, TodoCompleted:
		default:
			return fmt.Sprintf("item %d has status %q; use pending, in_progress or completed", i+1, t.Status)
		}
	}
	return ""
}

func runTodo(_ context.Context, env *Env, in *todoInput) Result {
	items := slices.Clone(in.Todos)
	env.mu.Lock()
	env.todos = items
	env.mu.Unlock()
	return Result{Output: renderTodos(items)}
}

func renderTodos(items []TodoItem) string {
	if len(items) == 0 {
		return "The todo list is now empty."
	}
	done, active := 0, 0
	for _, t := range items {
		switch t.Status {
		case TodoCompleted:
			done++
		case TodoInProgress:
			active++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Todo list updated (%d of %d completed):\n", done, len(items))
	for _, t := range items {
		switch t.Status {
		case TodoCompleted:
			fmt.Fprintf(&b, "[x] %s\n", t.Content)
		case TodoInProgress:
			fmt.Fprintf(&b, "[~] %s (in progress)\n", t.Content)
		default:
			fmt.Fprintf(&b, "[ ] %s\n", t.Content)
		}
	}
	if active > 1 {
		fmt.Fprintf(&b, "Note: %d items are in progress; work on one at a time and mark it completed before starting the next.\n", active)
	}
	return b.String()
}
