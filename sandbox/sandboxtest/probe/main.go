// Command harvest-probe runs inside a box during Harvest's isolation tests and
// attempts one thing per invocation with real syscalls, printing "ok ..." or
// "err ERRNO message". It depends on nothing in the box's image.
//
//	harvest-probe read PATH            print the file's first line
//	harvest-probe write PATH           create/append a line
//	harvest-probe link OLD NEW         hard link
//	harvest-probe tcp HOST:PORT        TCP connect
//	harvest-probe udp HOST:PORT        UDP send (reports the send result)
//	harvest-probe dns NAME             resolve NAME
//	harvest-probe unix PATH|@NAME      connect to a unix socket
//	harvest-probe ifaces               list network interfaces
//	harvest-probe kill PID SIGNAL      send a signal
//	harvest-probe pids                 list pids visible in /proc
//	harvest-probe tiocsti              inject a byte into the terminal on fd 0
//	harvest-probe devtty               open /dev/tty
//	harvest-probe userns               unshare(CLONE_NEWUSER)
//	harvest-probe status               uid, NoNewPrivs, Seccomp, CapEff
//	                                   (NoNewPrivs from prctl when the
//	                                   status has no such line: gVisor)
//	harvest-probe membomb MB           allocate and touch MB mebibytes
//	harvest-probe forkbomb             fork until the kernel refuses, then hold
//	harvest-probe fds                  list /proc/1/fd and /proc/self/fd targets
//	harvest-probe fence BOXID          try to disarm the box's fence through
//	                                   every unix socket the box can see
//	                                   (/proc/net/unix): "ok disarmed PATH" if
//	                                   one agent took it, else "err ..."
//	harvest-probe http URL N BYTES     N concurrent requests (POST of BYTES
//	                                   pattern bytes, or GET when 0); prints
//	                                   "ok STATUS LENGTH SHA256" of the bodies,
//	                                   which must all be equal
//	harvest-probe halfclose NET ADDR BYTES
//	                                   connect, send BYTES pattern bytes, shut
//	                                   the writing half, read to EOF; prints
//	                                   "ok LENGTH SHA256" of what came back
//	harvest-probe send NET ADDR BYTES  connect, send BYTES pattern bytes, close
//	harvest-probe hold NET ADDR        connect, send "hello\n", read until the
//	                                   connection ends
//	harvest-probe idle NET ADDR        connect, print "ok connected", never read
//	harvest-probe serve NET ADDR MODE [BYTES]
//	                                   listen, print "ok listening ADDR" (the
//	                                   address bound), then serve every
//	                                   connection: echo (copy back, shut the
//	                                   writing half at EOF), splice (the same
//	                                   with the copy done by the kernel's
//	                                   splice(2), as Go's io.Copy between
//	                                   sockets does), send (BYTES
//	                                   pattern bytes, then close), or http
//	                                   (GET /bytes/N, POST /echo)
//	harvest-probe stall ADDR           listen on TCP ADDR with a backlog of 0
//	                                   and never accept: the first connect
//	                                   completes, later ones hang; prints
//	                                   "ok listening ADDR"
//
// The pattern is byte i = i % 251 (package sandboxtest/pattern).
package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/harvest-dev/harvest/sandbox/proto"
	"github.com/harvest-dev/harvest/sandbox/sandboxtest/pattern"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("err EINVAL usage")
		os.Exit(2)
	}
	args := os.Args[2:]
	arg := func(i int) string {
		if i < len(args) {
			return args[i]
		}
		fmt.Println("err EINVAL missing argument")
		os.Exit(2)
		return ""
	}
	switch os.Args[1] {
	case "read":
		f, err := os.Open(arg(0))
		if err != nil {
			fail(err)
		}
		line, _ := bufio.NewReader(f).ReadString('\n')
		fmt.Println("ok", strings.TrimSpace(line))
	case "write":
		f, err := os.OpenFile(arg(0), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fail(err)
		}
		if _, err := f.WriteString("written from a box\n"); err != nil {
			fail(err)
		}
		fmt.Println("ok")
	case "link":
		if err := os.Link(arg(0), arg(1)); err != nil {
			fail(err)
		}
		fmt.Println("ok")
	case "tcp":
		c, err := net.DialTimeout("tcp", arg(0), 3*time.Second)
		if err != nil {
			fail(err)
		}
		c.Close()
		fmt.Println("ok")
	case "udp":
		c, err := net.Dial("udp", arg(0))
		if err != nil {
			fail(err)
		}
		if _, err := c.Write([]byte("from-box")); err != nil {
			fail(err)
		}
		fmt.Println("ok sent")
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, arg(0))
		if err != nil {
			fail(err)
		}
		fmt.Println("ok", strings.Join(addrs, " "))
	case "unix":
		name := arg(0)
		if strings.HasPrefix(name, "@") {
			name = "\x00" + name[1:]
		}
		c, err := net.DialTimeout("unix", name, 3*time.Second)
		if err != nil {
			fail(err)
		}
		c.Close()
		fmt.Println("ok")
	case "ifaces":
		ifs, err := net.Interfaces()
		if err != nil {
			fail(err)
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		fmt.Println("ok", strings.Join(names, " "))
	case "kill":
		pid, _ := strconv.Atoi(arg(0))
		sig, _ := strconv.Atoi(arg(1))
		if err := syscall.Kill(pid, syscall.Signal(sig)); err != nil {
			fail(err)
		}
		fmt.Println("ok")
	case "pids":
		ents, err := os.ReadDir("/proc")
		if err != nil {
			fail(err)
		}
		var pids []string
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, e.Name())
			}
		}
		fmt.Println("ok", strings.Join(pids, " "))
	case "tiocsti":
		c := byte('x')
		_, _, e := syscall.Syscall(syscall.SYS_IOCTL, 0, syscall.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		if e != 0 {
			fail(e)
		}
		fmt.Println("ok injected")
	case "devtty":
		f, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
		if err != nil {
			fail(err)
		}
		f.Close()
		fmt.Println("ok")
	case "userns":
		// A fresh child so the Go runtime's threads do not matter.
		cmd := exec.Command("/proc/self/exe", "status")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
		if out, err := cmd.CombinedOutput(); err != nil {
			fail(unwrapErrno(err))
		} else {
			fmt.Println("ok", strings.TrimSpace(string(out)))
		}
	case "status":
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			fail(err)
		}
		var keep []string
		for _, l := range strings.Split(string(b), "\n") {
			for _, k := range []string{"Uid:", "NoNewPrivs:", "Seccomp:", "CapEff:", "CapBnd:"} {
				if strings.HasPrefix(l, k) {
					keep = append(keep, strings.Join(strings.Fields(l), " "))
				}
			}
		}
		if !strings.Contains(string(b), "\nNoNewPrivs:") {
			// gVisor's status has no such line: ask the kernel itself.
			nnp, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, 39 /* PR_GET_NO_NEW_PRIVS */, 0, 0)
			if errno != 0 {
				fail(errno)
			}
			keep = append(keep, fmt.Sprintf("NoNewPrivs: %d (prctl)", nnp))
		}
		fmt.Println("ok", strings.Join(keep, "; "))
	case "membomb":
		mb, _ := strconv.Atoi(arg(0))
		var chunks [][]byte
		for i := 0; i < mb; i++ {
			c := make([]byte, 1<<20)
			for j := 0; j < len(c); j += 4096 {
				c[j] = 1
			}
			chunks = append(chunks, c)
		}
		fmt.Println("ok survived", len(chunks))
	case "forkbomb":
		forkbomb()
	case "fence":
		fence(arg(0))
	case "fds":
		for _, dir := range []string{"/proc/1/fd", "/proc/self/fd"} {
			ents, err := os.ReadDir(dir)
			if err != nil {
				fmt.Println("err", dir, err)
				continue
			}
			for _, e := range ents {
				t, _ := os.Readlink(dir + "/" + e.Name())
				fmt.Println("fd", dir, e.Name(), t)
			}
		}
		fmt.Println("ok")
	case "http":
		n, _ := strconv.Atoi(arg(1))
		size, _ := strconv.ParseInt(arg(2), 10, 64)
		httpMany(arg(0), max(n, 1), size)
	case "halfclose":
		size, _ := strconv.ParseInt(arg(2), 10, 64)
		c, err := net.DialTimeout(arg(0), arg(1), 10*time.Second)
		if err != nil {
			fail(err)
		}
		// Read while writing: an echo server sends back before the end.
		werr := make(chan error, 1)
		go func() {
			_, err := io.Copy(c, pattern.New(size))
			if err == nil {
				err = c.(interface{ CloseWrite() error }).CloseWrite()
			}
			werr <- err
		}()
		h := sha256.New()
		got, err := io.Copy(h, c)
		if err == nil {
			err = <-werr
		}
		if err != nil {
			fail(err)
		}
		fmt.Println("ok", got, hex.EncodeToString(h.Sum(nil)))
	case "send":
		size, _ := strconv.ParseInt(arg(2), 10, 64)
		c, err := net.DialTimeout(arg(0), arg(1), 10*time.Second)
		if err != nil {
			fail(err)
		}
		if _, err := io.Copy(c, pattern.New(size)); err != nil {
			fail(err)
		}
		if err := c.Close(); err != nil {
			fail(err)
		}
		fmt.Println("ok sent", size)
	case "hold":
		c, err := net.DialTimeout(arg(0), arg(1), 10*time.Second)
		if err != nil {
			fail(err)
		}
		if _, err := c.Write([]byte("hello\n")); err != nil {
			fail(err)
		}
		if _, err := io.Copy(io.Discard, c); err != nil {
			fail(err)
		}
		fmt.Println("ok eof")
	case "idle":
		c, err := net.DialTimeout(arg(0), arg(1), 10*time.Second)
		if err != nil {
			fail(err)
		}
		fmt.Println("ok connected", c.LocalAddr())
		os.Stdout.Sync()
		holdForever()
	case "serve":
		var size int64
		if len(args) > 3 {
			size, _ = strconv.ParseInt(args[3], 10, 64)
		}
		serve(arg(0), arg(1), arg(2), size)
	case "stall":
		stall(arg(0))
	default:
		fmt.Println("err EINVAL unknown probe", os.Args[1])
		os.Exit(2)
	}
}

// httpMany makes n requests at once, each on its own connection.
func httpMany(url string, n int, size int64) {
	tr := &http.Transport{DisableKeepAlives: true, Proxy: nil}
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	type result struct {
		line string
		err  error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var resp *http.Response
			var err error
			if size > 0 {
				req, _ := http.NewRequest("POST", url, pattern.New(size))
				req.ContentLength = size
				resp, err = client.Do(req)
			} else {
				resp, err = client.Get(url)
			}
			if err != nil {
				results[i].err = err
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			got, err := io.Copy(h, resp.Body)
			if err != nil {
				results[i].err = err
				return
			}
			results[i].line = fmt.Sprintf("%d %d %s", resp.StatusCode, got, hex.EncodeToString(h.Sum(nil)))
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r.err != nil {
			fail(r.err)
		}
		if r.line != results[0].line {
			fmt.Println("err EINVAL responses differ:", r.line, "vs", results[0].line)
			os.Exit(1)
		}
	}
	fmt.Println("ok", results[0].line)
}

// serve listens and serves every connection in mode until killed.
func serve(network, addr, mode string, size int64) {
	l, err := net.Listen(network, addr)
	if err != nil {
		fail(err)
	}
	fmt.Println("ok listening", l.Addr())
	os.Stdout.Sync()
	if mode == "http" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /bytes/{n}", func(w http.ResponseWriter, r *http.Request) {
			n, _ := strconv.ParseInt(r.PathValue("n"), 10, 64)
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			io.Copy(w, pattern.New(n))
		})
		mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body) // HTTP/1 handlers read before they write
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Write(body)
		})
		http.Serve(l, mux)
		return
	}
	for {
		c, err := l.Accept()
		if err != nil {
			fail(err)
		}
		go func() {
			defer c.Close()
			switch mode {
			case "echo", "splice":
				// echo copies through a buffer in the probe; splice lets
				// io.Copy hand the copy to the kernel (splice(2) from
				// the socket to itself through a pipe, for TCP).
				var err error
				if mode == "splice" {
					_, err = io.Copy(c, c)
				} else {
					_, err = io.CopyBuffer(struct{ io.Writer }{c}, struct{ io.Reader }{c}, make([]byte, 32<<10))
				}
				if err == nil {
					c.(interface{ CloseWrite() error }).CloseWrite()
					io.Copy(io.Discard, c)
				}
			case "send":
				io.Copy(c, pattern.New(size))
			}
		}()
	}
}

// stall listens with a backlog of 0 and never accepts.
func stall(addr string) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		fmt.Println("err EINVAL want an IPv4 IP:PORT")
		os.Exit(2)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		fail(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: ap.Addr().As4(), Port: int(ap.Port())}); err != nil {
		fail(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		fail(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		fail(err)
	}
	in4 := sa.(*syscall.SockaddrInet4)
	fmt.Println("ok listening", netip.AddrPortFrom(netip.AddrFrom4(in4.Addr), uint16(in4.Port)))
	os.Stdout.Sync()
	holdForever()
}

// forkbomb starts sleeping children until fork fails, reports how many it got,
// then blocks (its children and it are killed by the test).
func forkbomb() {
	n := 0
	var lastErr error
	for i := 0; i < 100000; i++ {
		cmd := exec.Command("/proc/self/exe", forkbombChild)
		if err := cmd.Start(); err != nil {
			lastErr = err
			break
		}
		n++
	}
	fmt.Printf("ok started %d children; then: %v\n", n, unwrapErrno(lastErr))
	os.Stdout.Sync()
	holdForever()
}

// holdForever blocks until the process is killed. A bare select{} would not:
// with no other goroutine, the runtime calls it a deadlock and exits.
func holdForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// forkbombChild is the argument the forkbomb's children run with.
const forkbombChild = "forkbomb-child"

func init() {
	if len(os.Args) > 1 && os.Args[1] == forkbombChild {
		holdForever()
	}
}

func unwrapErrno(err error) error {
	var en syscall.Errno
	if errors.As(err, &en) {
		return en
	}
	return err
}

func fail(err error) {
	name := "ERR"
	var en syscall.Errno
	if errors.As(err, &en) {
		name = errnoName(en)
	}
	fmt.Println("err", name, err)
	os.Exit(1)
}

func errnoName(e syscall.Errno) string {
	switch e {
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.EACCES:
		return "EACCES"
	case syscall.EPERM:
		return "EPERM"
	case syscall.EROFS:
		return "EROFS"
	case syscall.EXDEV:
		return "EXDEV"
	case syscall.ESRCH:
		return "ESRCH"
	case syscall.ENETUNREACH:
		return "ENETUNREACH"
	case syscall.ECONNREFUSED:
		return "ECONNREFUSED"
	case syscall.ENXIO:
		return "ENXIO"
	case syscall.EAGAIN:
		return "EAGAIN"
	case syscall.ENOTTY:
		return "ENOTTY"
	case syscall.EINVAL:
		return "EINVAL"
	case syscall.EHOSTUNREACH:
		return "EHOSTUNREACH"
	case syscall.EADDRNOTAVAIL:
		return "EADDRNOTAVAIL"
	}
	return "E" + strconv.Itoa(int(e))
}

// fence tries, through every unix socket path in /proc/net/unix, a hello
// as box id and a fence call that disarms: what a process in the box must
// never manage (package agentd's "Fence").
func fence(id string) {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		fail(err)
	}
	var tried []string
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[7], "/") {
			continue
		}
		path := f[7]
		c, err := net.DialTimeout("unix", path, 3*time.Second)
		if err != nil {
			tried = append(tried, path+": "+err.Error())
			continue
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br, bw := bufio.NewReader(c), bufio.NewWriter(c)
		call := func(id uint32, method string, params any) error {
			p, _ := json.Marshal(params)
			payload, _ := proto.EncodeMessage(proto.Call{Method: method, Params: p}, nil)
			if err := proto.WriteFrame(bw, proto.Frame{Type: proto.TypeCall, ID: id, Payload: payload}); err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return err
			}
			for {
				fr, err := proto.ReadFrame(br)
				if err != nil {
					return err
				}
				if fr.Type != proto.TypeReply || fr.ID != id {
					continue
				}
				var r proto.Reply
				if _, err := proto.DecodeMessage(fr.Payload, &r); err != nil {
					return err
				}
				if r.Error != nil {
					return r.Error
				}
				return nil
			}
		}
		err = call(1, proto.MethodHello, proto.Hello{Version: proto.Version, BoxID: id})
		if err == nil {
			err = call(2, proto.MethodFence, proto.FenceParams{Off: true})
			if err == nil {
				fmt.Println("ok disarmed", path)
				return
			}
		}
		c.Close()
		tried = append(tried, path+": "+err.Error())
	}
	fmt.Printf("err EPERM no agent took it: %q\n", tried)
}
