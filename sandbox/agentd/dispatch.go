package agentd

import (
	"encoding/json"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"syscall"
	"time"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// dispatch runs one call. It returns the result, an optional blob and an error.
func (c *conn) dispatch(method string, params json.RawMessage, blob []byte) (any, []byte, error) {
	s := c.s
	switch method {
	case proto.MethodExec:
		prm, err := decode[proto.ExecParams](params)
		if err != nil {
			return nil, nil, err
		}
		if err := c.checkStream(prm.Stream); err != nil {
			return nil, nil, err
		}
		p, err := s.startProc(c, prm)
		if err != nil {
			return nil, nil, err
		}
		r := proto.ExecReply{Proc: p.id, PID: p.pid}
		if p.stdin != nil {
			r.StdinWindow = proto.DefaultWindow
		}
		return r, nil, nil

	case proto.MethodAttach:
		prm, err := decode[proto.AttachParams](params)
		if err != nil {
			return nil, nil, err
		}
		p := s.lookup(prm.Proc)
		if p == nil {
			return nil, nil, &proto.Error{Code: proto.CodeNoProcess, Message: proto.ErrNoProcess.Error()}
		}
		if err := c.checkStream(prm.Stream); err != nil {
			return nil, nil, err
		}
		c.setStream(prm.Stream, p)
		p.attach(c, prm.Stream, int64(prm.Window))
		r := proto.ExecReply{Proc: p.id, PID: p.pid}
		if p.stdin != nil {
			r.StdinWindow = proto.DefaultWindow
		}
		return r, nil, nil

	case proto.MethodSignal:
		prm, err := decode[proto.SignalParams](params)
		if err != nil {
			return nil, nil, err
		}
		p, err := s.runningProc(prm.Proc)
		if err != nil {
			return nil, nil, err
		}
		sig := syscall.Signal(prm.Signal)
		if prm.Signal <= 0 || prm.Signal > 64 {
			return nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: "signal: bad signal number"}
		}
		target := p.pid
		if prm.Group {
			target = -p.pgid
		}
		if err := syscall.Kill(target, sig); err != nil && err != syscall.ESRCH {
			return nil, nil, errno(err)
		}
		return struct{}{}, nil, nil

	case proto.MethodKill:
		prm, err := decode[proto.KillParams](params)
		if err != nil {
			return nil, nil, err
		}
		p := s.lookup(prm.Proc)
		if p == nil {
			return nil, nil, &proto.Error{Code: proto.CodeNoProcess, Message: proto.ErrNoProcess.Error()}
		}
		killTree(p.pid, p.pgid, p.id)
		return struct{}{}, nil, nil

	case proto.MethodResize:
		prm, err := decode[proto.ResizeParams](params)
		if err != nil {
			return nil, nil, err
		}
		p, err := s.runningProc(prm.Proc)
		if err != nil {
			return nil, nil, err
		}
		if p.tty == nil {
			return nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: "resize: the process has no terminal"}
		}
		if err := setSize(p.tty, prm.Rows, prm.Cols); err != nil {
			return nil, nil, errno(err)
		}
		return struct{}{}, nil, nil

	case proto.MethodPs:
		procs := s.procList()
		out := proto.PsReply{Procs: make([]proto.ProcInfo, 0, len(procs))}
		for _, p := range procs {
			out.Procs = append(out.Procs, p.info())
		}
		sort.Slice(out.Procs, func(i, j int) bool { return out.Procs[i].Proc < out.Procs[j].Proc })
		return out, nil, nil

	case proto.MethodRead:
		prm, err := decode[proto.ReadParams](params)
		if err != nil {
			return nil, nil, err
		}
		return s.readFile(prm)
	case proto.MethodWrite:
		prm, err := decode[proto.WriteParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.writeFile(prm, blob)
		return r, nil, err
	case proto.MethodStat:
		prm, err := decode[proto.PathParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.stat(prm)
		return r, nil, err
	case proto.MethodList:
		prm, err := decode[proto.ListParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.list(prm)
		return r, nil, err
	case proto.MethodRemove:
		prm, err := decode[proto.RemoveParams](params)
		if err != nil {
			return nil, nil, err
		}
		return struct{}{}, nil, s.remove(prm)
	case proto.MethodMkdir:
		prm, err := decode[proto.MkdirParams](params)
		if err != nil {
			return nil, nil, err
		}
		return struct{}{}, nil, s.mkdir(prm)
	case proto.MethodRename:
		prm, err := decode[proto.RenameParams](params)
		if err != nil {
			return nil, nil, err
		}
		return struct{}{}, nil, s.rename(prm)
	case proto.MethodGlob:
		prm, err := decode[proto.GlobParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.glob(prm)
		return r, nil, err
	case proto.MethodGrep:
		prm, err := decode[proto.GrepParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.grep(prm)
		return r, nil, err

	case proto.MethodInfo:
		prm, err := decode[proto.InfoParams](params)
		if err != nil {
			return nil, nil, err
		}
		if prm.Collect {
			debug.FreeOSMemory()
		}
		return s.info(), nil, nil

	case proto.MethodListen:
		prm, err := decode[proto.ListenParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := c.listen(prm)
		return r, nil, err
	case proto.MethodListenClose:
		prm, err := decode[proto.ListenCloseParams](params)
		if err != nil {
			return nil, nil, err
		}
		c.closeListener(prm.Listener)
		return struct{}{}, nil, nil
	case proto.MethodConnClose:
		prm, err := decode[proto.ConnCloseParams](params)
		if err != nil {
			return nil, nil, err
		}
		c.connClose(prm)
		return struct{}{}, nil, nil

	case proto.MethodFence:
		prm, err := decode[proto.FenceParams](params)
		if err != nil {
			return nil, nil, err
		}
		r, err := s.arm(c, prm)
		return r, nil, err

	case proto.MethodShutdown:
		prm, err := decode[proto.ShutdownParams](params)
		if err != nil {
			return nil, nil, err
		}
		s.Shutdown(time.Duration(prm.GraceMS) * time.Millisecond)
		return struct{}{}, nil, nil
	}
	return nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: "unknown method " + method}
}

func (s *Server) runningProc(id uint64) (*proc, error) {
	p := s.lookup(id)
	if p == nil || p.hasExited() {
		return nil, &proto.Error{Code: proto.CodeNoProcess, Message: proto.ErrNoProcess.Error()}
	}
	return p, nil
}

func (s *Server) info() proto.InfoReply {
	r := proto.InfoReply{
		UptimeMS: time.Since(s.started).Milliseconds(),
		Threads:  runtime.NumGoroutine(),
	}
	if st, err := readStatus(); err == nil {
		r.RSSBytes = st.rss
		r.Threads = st.threads
	}
	for _, p := range s.procList() {
		if !p.hasExited() {
			r.Procs++
		}
	}
	r.BoxProcs = len(scanProcs())
	s.mu.Lock()
	r.Conns = len(s.conns)
	s.mu.Unlock()
	r.Listeners = int(s.listeners.Load())
	r.Forwards = int(s.forwards.Load())
	return r
}

type procStatus struct {
	rss     int64
	threads int
}

func readStatus() (procStatus, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return procStatus{}, err
	}
	var st procStatus
	for _, line := range splitLines(b) {
		var n int64
		switch {
		case hasPrefix(line, "VmRSS:"):
			n = parseLeadingInt(line[len("VmRSS:"):])
			st.rss = n * 1024
		case hasPrefix(line, "Threads:"):
			st.threads = int(parseLeadingInt(line[len("Threads:"):]))
		}
	}
	return st, nil
}
