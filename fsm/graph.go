package fsm

import (
	"fmt"
	"strings"

	lfsm "github.com/looplab/fsm"
)

// GraphFormat is an output format for Graph.
type GraphFormat string

// The graph formats.
const (
	Mermaid  GraphFormat = "mermaid"
	Graphviz GraphFormat = "dot"
)

// Graph exports the table as a Mermaid flowchart or a Graphviz digraph,
// rendered by looplab/fsm. Edges that carry the kill-executor effect have
// "+kill-executor" in their label; in Graphviz they are also drawn red.
func (t *Table) Graph(format GraphFormat) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lf := t.mirror()
	lf.SetState(StateCreated.String())
	switch format {
	case Mermaid:
		return lfsm.VisualizeWithType(lf, lfsm.MermaidFlowChart)
	case Graphviz:
		out, err := lfsm.VisualizeWithType(lf, lfsm.GRAPHVIZ)
		if err != nil {
			return "", err
		}
		out = strings.ReplaceAll(out, `kill-executor" ]`, `kill-executor", color = "red" ]`)
		return out, nil
	default:
		return "", fmt.Errorf("fsm: unknown graph format %q (want %q or %q)", format, Mermaid, Graphviz)
	}
}
