package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/tether-fsm/tether/driver"
	"github.com/tether-fsm/tether/fsm"
	"github.com/tether-fsm/tether/job"
	"github.com/tether-fsm/tether/store"
)

func TestDecodeRequest_ValidRequests(t *testing.T) {
	spec := sleeper("web", "m")
	for _, r := range []Request{
		{Op: OpStart, ID: "web-1", Spec: &spec},
		{Op: OpStop, ID: "web-1", Signal: 15, Grace: time.Second},
		{Op: OpSignal, ID: "web-1", Signal: 1, Main: true},
		{Op: OpList, All: true},
		{Op: OpReconcile, IDs: []string{"a", "b"}},
		{Op: OpEnable, Enable: &EnableRequest{File: "/etc/tether/web.hcl", Text: []byte("task"), Inputs: job.Inputs{Task: "web", Vars: map[string]string{"a": "1"}}}},
		{Op: OpPlanJob, Job: &JobRequest{Source: job.Source{File: "web.hcl", Text: []byte("job")}, Overrides: job.Overrides{Env: []string{"A=1"}}, Once: true}},
		{Op: OpStartGroup, IDs: []string{"web-1", "side-1"}, Path: "/bin"},
		{Op: OpAdoptGroups},
		{Op: OpDisable, Name: "web"},
		{Op: OpWatch},
		{Op: OpGC, OlderThan: time.Hour},
		{Op: OpSalvage},
		{Op: OpCheck},
		{Op: OpResolve, Name: "web"},
		{Op: OpStartNamed, ID: "web-1", Spec: &spec, Replace: true, Path: "/usr/bin:/bin"},
		{Op: OpRestart, ID: "web-1", NewID: "web-2", Path: "/bin"},
		{Op: OpRestartDesired, Name: "web"},
		{Op: OpCreateGroup, Group: []driver.GroupTask{{ID: "web-1", Spec: spec}}, Replace: true},
		{Op: OpRunGroup, IDs: []string{"web-1", "side-1"}, Wait: true},
		{Op: OpStopGroup, IDs: []string{"web-1"}, Signal: 15, Grace: time.Second},
		{Op: OpGroups},
		{Op: OpGroupDriven, Name: "a1"},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRequest(b)
		if err != nil {
			t.Errorf("%s: %v", b, err)
			continue
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("round trip of %s: %+v", b, got)
		}
	}
}

func TestDecodeRequest_RefusesBadRequests(t *testing.T) {
	for in, want := range map[string]error{
		`{"op":"start","id":"web-1"}`:                   ErrBadRequest, // no spec
		`{"op":"start","id":"../x","spec":{}}`:          ErrBadRequest,
		`{"op":"launch","id":"a"}`:                      ErrBadRequest,
		`{"op":"stop","id":"a","signal":99}`:            ErrBadRequest,
		`{"op":"stop","id":"a","grace":-1}`:             ErrBadRequest,
		`{"op":"enable","enable":{"file":"web.hcl"}}`:   ErrBadRequest, // relative file
		`{"op":"enable"}`:                               ErrBadRequest, // no file
		`{"op":"enable","file":"/w.hcl","spec":{}}`:     ErrProtocol,   // version 3's enable: no such field
		`{"op":"plan-job"}`:                             ErrBadRequest, // no file
		`{"op":"start-group","ids":[]}`:                 ErrBadRequest,
		`{"op":"start-group","ids":["../x"]}`:           ErrBadRequest,
		`{"op":"disable"}`:                              ErrBadRequest,
		`{"op":"list","allow_caps":["net_raw"]}`:        ErrProtocol, // no such field: a request cannot carry an allow list
		`{"op":"list"} {"op":"list"}`:                   ErrProtocol,
		`not json`:                                      ErrProtocol,
		``:                                              ErrProtocol,
		`{"op":"none"}`:                                 ErrBadRequest,
		`{"op":"start-named","id":"web-1"}`:             ErrBadRequest, // no spec
		`{"op":"restart","id":"web-1","new_id":"../x"}`: ErrBadRequest,
		`{"op":"restart-desired"}`:                      ErrBadRequest,
		`{"op":"list","path":"/bin\u0000/x"}`:           ErrBadRequest, // a PATH with a NUL
	} {
		_, err := DecodeRequest([]byte(in))
		if !errors.Is(err, want) {
			t.Errorf("DecodeRequest(%s) = %v; want %v", in, err, want)
		}
	}
	if _, err := DecodeRequest(bytes.Repeat([]byte{' '}, maxRequestFrame+1)); !errors.Is(err, ErrProtocol) {
		t.Errorf("an oversized request: %v", err)
	}
}

func TestReadFrame_RefusesOversizedFrames(t *testing.T) {
	var buf bytes.Buffer
	buf.Write([]byte{0x7f, 0xff, 0xff, 0xff})
	if _, err := readFrame(&buf, maxRequestFrame); !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "2147483647") {
		t.Fatalf("readFrame of a 2 GiB header = %v; want a protocol error naming its size, nothing allocated", err)
	}
}

// An error crosses the socket with its text and its identity.
func TestWireError_KeepsTextAndIdentity(t *testing.T) {
	inner := &driver.TaskError{Task: "web-1", State: fsm.StateRunning, Err: driver.ErrNotRunning}
	for _, err := range []error{
		inner,
		&driver.TaskError{Task: "web-1", Err: driver.ErrUnknownTask},
		&store.CorruptError{Task: "t", Seq: 3, Reason: "checksum mismatch"},
		errors.Join(errors.New("context"), store.ErrLocked),
		&driver.NameError{Name: "web", Tasks: []fsm.Task{{ID: "web-1", State: fsm.StateRunning}, {ID: "web-2", State: fsm.StateRunning}}, Err: driver.ErrAmbiguous},
		fmt.Errorf("start: %w", &driver.TaskError{Task: "web-3", State: fsm.StateNone,
			Err: &driver.NameError{Name: "web", Tasks: []fsm.Task{{ID: "web-1"}}, Err: driver.ErrNameTaken}}),
		fmt.Errorf("wrapped: %w", os.ErrPermission),
		fmt.Errorf("plan: %w", &job.ParseError{File: "web.hcl", Lines: []string{"web.hcl:1,1-2: Error: broken"}}),
		fmt.Errorf("task %q: %w: template source /x", "web", job.ErrNotAllowed),
	} {
		w := toWireError(err)
		b, _ := json.Marshal(w)
		var back wireError
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		got := back.err()
		if got.Error() != err.Error() {
			t.Errorf("text: %q, want %q", got, err)
		}
		for _, c := range wireCodes {
			if errors.Is(got, c.err) != errors.Is(err, c.err) {
				t.Errorf("%q: errors.Is(%v) = %v across the socket, %v here", err, c.err, errors.Is(got, c.err), errors.Is(err, c.err))
			}
		}
		var te, gte *driver.TaskError
		if errors.As(err, &te) != errors.As(got, &gte) {
			t.Errorf("%q: errors.As(*driver.TaskError) differs across the socket", err)
		} else if te != nil && (te.Task != gte.Task || te.State != gte.State || te.Err.Error() != gte.Err.Error()) {
			t.Errorf("%q: the task error across the socket is %+v, here %+v", err, gte, te)
		}
		var pe, gpe *job.ParseError
		if errors.As(err, &pe) != errors.As(got, &gpe) || pe != nil && !reflect.DeepEqual(pe, gpe) {
			t.Errorf("%q: the parse error across the socket is %+v, here %+v", err, gpe, pe)
		}
		var ne, gne *driver.NameError
		if errors.As(err, &ne) != errors.As(got, &gne) {
			t.Errorf("%q: errors.As(*driver.NameError) differs across the socket", err)
		} else if ne != nil && (ne.Name != gne.Name || !reflect.DeepEqual(ne.Tasks, gne.Tasks) || !errors.Is(gne.Err, ne.Err)) {
			t.Errorf("%q: the name error across the socket is %+v, here %+v", err, gne, ne)
		}
	}
}

// Every named error of the packages a CLI's errors come from has a wire
// code, spelled after its name (ErrUnknownTask: "driver.unknown-task"), so
// that a command through an agent picks the exit code and the hint it
// picks daemonless. A new Err in one of them fails here until it is added
// to wireCodes.
func TestWireCodes_NameEveryNamedError(t *testing.T) {
	codes := map[string]error{}
	for _, c := range wireCodes {
		if _, dup := codes[c.code]; dup {
			t.Errorf("wire code %q twice", c.code)
		}
		codes[c.code] = c.err
	}
	for pkg, dir := range map[string]string{"driver": "../driver", "store": "../store", "executor": "../executor",
		"cgroup": "../cgroup", "agent": ".", "job": "../job", "taskfile": "../taskfile"} {
		for _, name := range namedErrors(t, dir) {
			code := pkg + "." + kebab(strings.TrimPrefix(name, "Err"))
			if _, ok := codes[code]; !ok {
				t.Errorf("%s.%s has no wire code (want %q in wireCodes)", pkg, name, code)
			}
		}
	}
}

// namedErrors are the exported Err* variables of the package in dir.
func namedErrors(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, sp := range g.Specs {
				for _, n := range sp.(*ast.ValueSpec).Names {
					if strings.HasPrefix(n.Name, "Err") && n.IsExported() {
						out = append(out, n.Name)
					}
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no named errors in %s", dir)
	}
	return out
}

// kebab spells a Go name in words: UnknownTask is unknown-task,
// InvalidTaskID invalid-task-id.
func kebab(s string) string {
	var b strings.Builder
	r := []rune(s)
	for i, c := range r {
		upper := unicode.IsUpper(c)
		if i > 0 && upper && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1])) {
			b.WriteByte('-')
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

func FuzzDecodeRequest(f *testing.F) {
	spec := sleeper("web", "m")
	for _, r := range []Request{
		{Op: OpStart, ID: "web-1", Spec: &spec},
		{Op: OpStop, ID: "web-1", Signal: 15, Grace: time.Second},
		{Op: OpEnable, Enable: &EnableRequest{File: "/etc/tether/web.hcl", Text: []byte("task"), Inputs: job.Inputs{Task: "web", Vars: map[string]string{"a": "1"}}}},
		{Op: OpPlanJob, Job: &JobRequest{Source: job.Source{File: "web.hcl", Text: []byte("job")}, Overrides: job.Overrides{Env: []string{"A=1"}}, Once: true}},
		{Op: OpStartGroup, IDs: []string{"web-1", "side-1"}, Path: "/bin"},
		{Op: OpAdoptGroups},
		{Op: OpReconcile, IDs: []string{"a"}},
		{Op: OpStartNamed, ID: "web-1", Spec: &spec, Replace: true, Path: "/bin"},
		{Op: OpRestart, ID: "web-1", NewID: "web-2"},
		{Op: OpResolve, Name: "web"},
		{Op: OpRestartDesired, Name: "web"},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"start","id":"a","spec":{"Env":{"":""}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err != nil {
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("DecodeRequest: an error of neither kind: %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("accepted a request that does not validate: %v", err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("an accepted request does not encode: %v", err)
		}
		again, err := DecodeRequest(b)
		if err != nil {
			t.Fatalf("an accepted request, encoded, is refused: %v\n%s", err, b)
		}
		b2, _ := json.Marshal(again)
		if !bytes.Equal(b, b2) {
			t.Fatalf("not stable:\n%s\n%s", b, b2)
		}
	})
}

// TestEncodeRequest_PlainStartIsTheSameRequest: a plain start, written
// from maps, decodes to the very request encoding/json's form of it
// decodes to, in every shape (nil and empty arguments and environment,
// characters JSON escapes, start-named with replace).
func TestEncodeRequest_PlainStartIsTheSameRequest(t *testing.T) {
	for i, r := range []Request{
		{Op: OpStart, ID: "sleeper-1", Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/sleep", Name: "sleep"}},
		{Op: OpStart, ID: "sleeper-1", Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/sleep", Args: []string{}, Env: map[string]string{}}, Path: "/usr/bin:/bin"},
		{Op: OpStart, ID: "s-2", Spec: &fsm.Spec{Driver: "exec", Command: "sh", Args: []string{"-c", "echo \"<&>\" \u2028 \x01 é"},
			Env: map[string]string{"A": "1", "B<": "\"x\""}, Dir: "/tmp", User: "nobody", Name: "sh"}, Path: "/bin"},
		{Op: OpStartNamed, ID: "web-3", Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/true", Name: "web"}, Replace: true, Path: "/bin"},
		{Op: OpStartNamed, ID: "web-4", Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/true", Name: "web"}},
	} {
		if _, ok := plainStart(r); !ok {
			t.Errorf("request %d: not taken as a plain start: %+v", i, r)
		}
		fast, err := encodeRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		slow, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeRequest(fast)
		if err != nil {
			t.Fatalf("request %d: the plain form %s does not decode: %v", i, fast, err)
		}
		want, err := DecodeRequest(slow)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %d: the plain form decodes to\n%+v\nencoding/json's to\n%+v", i, got, want)
		}
		if !reflect.DeepEqual(*got.Spec, *r.Spec) {
			t.Errorf("request %d: spec %+v came back as %+v", i, *r.Spec, *got.Spec)
		}
	}
}

// TestEncodeRequest_AnyOtherFieldIsEncodedInFull: a start that sets any
// field of the spec or the request beyond the plain ones (every field,
// one at a time, found by reflection: a field added later included), or
// an operation other than a start, is not written as a plain start.
func TestEncodeRequest_AnyOtherFieldIsEncodedInFull(t *testing.T) {
	plainSpec := map[string]bool{"Name": true, "Driver": true, "Command": true, "Args": true, "Env": true, "Dir": true, "User": true}
	plainReq := map[string]bool{"Op": true, "ID": true, "Spec": true, "Replace": true, "Path": true}
	base := func() Request {
		return Request{Op: OpStart, ID: "x-1", Spec: &fsm.Spec{Driver: "raw_exec", Command: "/bin/true"}}
	}
	if _, ok := plainStart(base()); !ok {
		t.Fatal("the base request is not plain")
	}
	st := reflect.TypeOf(fsm.Spec{})
	for i := range st.NumField() {
		f := st.Field(i)
		if plainSpec[f.Name] {
			continue
		}
		r := base()
		setNonZero(t, reflect.ValueOf(r.Spec).Elem().Field(i), f.Name)
		if _, ok := plainStart(r); ok {
			t.Errorf("a spec with %s set is written as a plain start", f.Name)
		}
	}
	rt := reflect.TypeOf(Request{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		if plainReq[f.Name] {
			continue
		}
		r := base()
		setNonZero(t, reflect.ValueOf(&r).Elem().Field(i), f.Name)
		if _, ok := plainStart(r); ok {
			t.Errorf("a start with %s set is written as a plain start", f.Name)
		}
	}
	for op := OpNone; op < numOps; op++ {
		r := base()
		r.Op = op
		if _, ok := plainStart(r); ok != (op == OpStart || op == OpStartNamed) {
			t.Errorf("op %s: plain %v", op, ok)
		}
	}
	r := base()
	r.Spec = nil
	if _, ok := plainStart(r); ok {
		t.Error("a start without a spec is written as a plain start")
	}
}

// setNonZero sets v to a value other than its zero value.
func setNonZero(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Field(i).CanSet() {
				setNonZero(t, v.Field(i), name+"."+v.Type().Field(i).Name)
				return
			}
		}
		t.Fatalf("%s: a struct with no settable field", name)
	default:
		t.Fatalf("%s: kind %s: teach setNonZero", name, v.Kind())
	}
}

// TestDecodeResponse_AStartsAnswerIsTheWholeAnswer: the answer to a start,
// decoded through taskAnswer, is what decoding it as a Response gives (a
// task with its spec and executor, replaced tasks, a task error, a
// heartbeat), and an answer holding anything taskAnswer lacks (another
// field of Response, a field of a task this build does not know) is
// decoded whole, losing nothing.
func TestDecodeResponse_AStartsAnswerIsTheWholeAnswer(t *testing.T) {
	spec := sleeper("web", "m")
	spec.Env = map[string]string{"A": "1"}
	task := fsm.Task{ID: "web-1", State: fsm.StateRunning, Version: 6, Spec: &spec, Nonce: "n", TaskPID: 42,
		Warnings: []fsm.Warning{{Kind: 1, Text: "w"}}, Reason: "r"}
	info := driver.TaskInfo{Task: task}
	for i, r := range []Response{
		{Kind: respResult, Task: &task},
		{Kind: respResult, Task: &task, Replaced: []fsm.Task{task, {ID: "web-0"}}},
		{Kind: respResult, Task: &fsm.Task{ID: "web-1"}, Err: toWireError(&driver.TaskError{Task: "web-1", State: fsm.StateFailed, Err: errors.New("boom")})},
		{Kind: respHeartbeat},
		{Kind: respProgress, Task: &task},
		{Kind: respResult, Task: &task, Info: &info},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []Op{OpStart, OpStartNamed} {
			got, err := decodeResponse(op, b)
			if err != nil {
				t.Fatalf("answer %d to %s: %v", i, op, err)
			}
			var want Response
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("answer %d to %s: decoded\n%+v\nwhole it is\n%+v", i, op, got, want)
			}
		}
	}
	// A task field this build does not know: decoded whole (the unknown
	// field dropped as encoding/json drops it, every known one kept).
	b := []byte(`{"kind":1,"task":{"ID":"web-1","State":6,"Later":true},"pid":7}`)
	got, err := decodeResponse(OpStart, b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Task == nil || got.Task.ID != "web-1" || got.Task.State != fsm.State(6) || got.PID != 7 {
		t.Errorf("an answer with fields beyond a start's: %+v", got)
	}
	if _, err := decodeResponse(OpStart, []byte(`{"kind":1,"task":`)); err == nil {
		t.Error("a truncated answer decoded without error")
	}
}

// TestDecodeResponse_SpecsDecodeAsEncodingJSONDoes: a start's answer
// whose task's spec is plain is decoded field by field (plainSpec), any
// other spec in full, and either way the task is what encoding/json makes
// of the answer: for a plain spec in every shape, and for a spec with each
// other field set in turn (found by reflection: a field added later
// included), and for keys encoding/json matches by case only.
func TestDecodeResponse_SpecsDecodeAsEncodingJSONDoes(t *testing.T) {
	check := func(name string, b []byte, wantPlain bool) {
		t.Helper()
		got, err := decodeResponse(OpStart, b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var want Response
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: decoded\n%+v\nencoding/json gives\n%+v", name, got.Task.Spec, want.Task.Spec)
		}
		var a taskAnswer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatal(err)
		}
		if _, ok := plainSpec(a.Task.Spec); ok != wantPlain {
			t.Errorf("%s: taken as plain %v, want %v", name, ok, wantPlain)
		}
	}
	answer := func(spec fsm.Spec) []byte {
		b, err := json.Marshal(Response{Kind: respResult, Task: &fsm.Task{ID: "x-1", State: fsm.StateRunning, Spec: &spec}})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i, spec := range []fsm.Spec{
		{Driver: "raw_exec", Command: "/bin/true"},
		{Driver: "raw_exec", Command: "/bin/sleep", Args: []string{}, Env: map[string]string{}, Name: "sleep"},
		{Driver: "exec", Command: "sh", Args: []string{"-c", "echo \"<&>\" é"}, Env: map[string]string{"A": "1"}, Dir: "/tmp", User: "nobody", Name: "sh"},
	} {
		check(fmt.Sprintf("plain spec %d", i), answer(spec), true)
	}
	st := reflect.TypeOf(fsm.Spec{})
	for i := range st.NumField() {
		f := st.Field(i)
		if plainSpecFields[f.Name] {
			continue
		}
		spec := fsm.Spec{Driver: "raw_exec", Command: "/bin/true"}
		setNonZero(t, reflect.ValueOf(&spec).Elem().Field(i), f.Name)
		check("a spec with "+f.Name+" set", answer(spec), false)
	}
	// Keys encoding/json matches by case only, and a key no field has.
	for _, spec := range []string{`{"command":"/bin/true","Driver":"raw_exec"}`, `{"Command":"/bin/true","Later":0}`, `{"Command":"/bin/true","Resources":{"memorymb":0}}`} {
		check("spec "+spec, []byte(`{"kind":1,"task":{"ID":"x-1","Spec":`+spec+`}}`), false)
	}
	// A replaced list, empty or not.
	b, err := json.Marshal(Response{Kind: respResult, Task: &fsm.Task{ID: "x-1"}, Replaced: []fsm.Task{{ID: "x-0", Spec: &fsm.Spec{Command: "/bin/true"}}}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeResponse(OpStartNamed, b)
	if err != nil || len(got.Replaced) != 1 || got.Replaced[0].Spec == nil || got.Replaced[0].Spec.Command != "/bin/true" {
		t.Errorf("replaced: %+v, %v", got.Replaced, err)
	}
	got, err = decodeResponse(OpStartNamed, []byte(`{"kind":1,"replaced":[]}`))
	if err != nil || got.Replaced == nil || len(got.Replaced) != 0 {
		t.Errorf("an empty replaced list: %#v, %v", got.Replaced, err)
	}
}
