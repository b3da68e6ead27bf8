package netlab

import (
	"context"
	"fmt"
	"net"
	"runtime"

	"golang.org/x/sys/unix"
)

// inNetns runs f on an OS thread of its own that has entered the network
// namespace at nsPath: a socket f makes, or a process f starts, belongs
// to that namespace for good (a socket keeps the namespace it was made
// in; a child starts in its parent thread's). The thread goes back to
// this process's namespace afterwards; if it cannot, it is locked until
// its goroutine ends, and then Go retires it.
func inNetns(nsPath string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: this thread's network namespace: %w", err)
			return
		}
		defer unix.Close(self)
		target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: opening %s: %w", nsPath, err)
			return
		}
		defer unix.Close(target)
		if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netlab: entering %s: %w", nsPath, err)
			return
		}
		ferr := f()
		if unix.Setns(self, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// dialIn dials address from inside the network namespace at nsPath (the
// connection stays there: its packets leave through that namespace's
// links and firewall).
func dialIn(ctx context.Context, nsPath, network, address string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(nsPath, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// listenPacketIn opens a UDP socket inside the network namespace at
// nsPath.
func listenPacketIn(nsPath, address string) (net.PacketConn, error) {
	var c net.PacketConn
	err := inNetns(nsPath, func() error {
		var err error
		c, err = net.ListenPacket("udp4", address)
		return err
	})
	return c, err
}
