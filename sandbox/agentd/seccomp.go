package agentd

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter every process in a box inherits from the agent. See the
// package doc for what it refuses and why. It is a classic BPF program over
// struct seccomp_data:
//
//	offset 0  int   nr
//	offset 4  u32   arch
//	offset 8  u64   instruction_pointer
//	offset 16 u64   args[6]   (little endian: low word first)
const (
	offNr      = 0
	offArch    = 4
	offArg0Low = 16
	offArg1Low = 24

	x32SyscallBit = 0x40000000
)

// deniedSyscalls answer EPERM outright. Most already fail for an unprivileged
// box user; refusing them here means a kernel bug behind one is out of reach.
var deniedSyscalls = []uintptr{
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_KEXEC_LOAD, unix.SYS_KEXEC_FILE_LOAD,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_OPEN_TREE, unix.SYS_MOVE_MOUNT, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	unix.SYS_SETNS, unix.SYS_SWAPON, unix.SYS_SWAPOFF, unix.SYS_REBOOT,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_OPEN_BY_HANDLE_AT,
}

// bpfProg assembles classic BPF with symbolic jump targets.
type bpfProg struct {
	ins    []unix.SockFilter
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string
}

func (p *bpfProg) stmt(code uint16, k uint32) {
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

// jump emits a conditional jump to labels jt / jf ("" = next instruction).
func (p *bpfProg) jump(code uint16, k uint32, jt, jf string) {
	p.fixups = append(p.fixups, fixup{at: len(p.ins), jt: jt, jf: jf})
	p.ins = append(p.ins, unix.SockFilter{Code: code, K: k})
}

func (p *bpfProg) label(name string) { p.labels[name] = len(p.ins) }

func (p *bpfProg) assemble() ([]unix.SockFilter, error) {
	for _, f := range p.fixups {
		for _, t := range []struct {
			name string
			dst  *uint8
		}{{f.jt, &p.ins[f.at].Jt}, {f.jf, &p.ins[f.at].Jf}} {
			if t.name == "" {
				continue
			}
			target, ok := p.labels[t.name]
			if !ok {
				return nil, fmt.Errorf("seccomp: unknown label %s", t.name)
			}
			off := target - f.at - 1
			if off < 0 || off > 255 {
				return nil, fmt.Errorf("seccomp: jump to %s out of range", t.name)
			}
			*t.dst = uint8(off)
		}
	}
	return p.ins, nil
}

func auditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, true
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, true
	}
	return 0, false
}

// buildFilter returns the box's seccomp program.
func buildFilter() ([]unix.SockFilter, error) {
	arch, ok := auditArch()
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	const (
		ld   = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq  = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge  = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		jset = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		ret  = unix.BPF_RET | unix.BPF_K
	)
	p := &bpfProg{labels: map[string]int{}}
	p.stmt(ld, offArch)
	p.jump(jeq, arch, "", "eperm") // other ABIs (i386 via int 0x80): refused
	p.stmt(ld, offNr)
	if runtime.GOARCH == "amd64" {
		p.jump(jge, x32SyscallBit, "eperm", "")
	}
	p.jump(jeq, uint32(unix.SYS_IOCTL), "ioctl", "")
	p.jump(jeq, uint32(unix.SYS_CLONE), "nsflags", "")
	p.jump(jeq, uint32(unix.SYS_UNSHARE), "nsflags", "")
	p.jump(jeq, uint32(unix.SYS_CLONE3), "enosys", "")
	for _, nr := range deniedSyscalls {
		p.jump(jeq, uint32(nr), "eperm", "")
	}
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)

	p.label("ioctl")
	p.stmt(ld, offArg1Low) // the request is an unsigned int: low word only
	p.jump(jeq, unix.TIOCSTI, "eperm", "")
	p.jump(jeq, unix.TIOCLINUX, "eperm", "")
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)

	p.label("nsflags") // clone(flags, ...) and unshare(flags): arg 0
	p.stmt(ld, offArg0Low)
	p.jump(jset, unix.CLONE_NEWUSER, "eperm", "")
	p.stmt(ret, unix.SECCOMP_RET_ALLOW)

	p.label("enosys")
	p.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	p.label("eperm")
	p.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	return p.assemble()
}

// installSeccomp sets no_new_privs and installs the filter on every thread.
// Both calls must happen on the same OS thread: the kernel checks
// no_new_privs of the calling thread (TSYNC then gives it and the filter to
// every other thread). The goroutine may move between them (inside bwrap or
// docker every thread already has no_new_privs, so it only showed on the
// host backend, now and then): it retries rather than lock its thread, as
// runtime.LockOSThread starts the runtime's template thread, a kernel task
// every idle box would hold for good.
func installSeccomp() error {
	ins, err := buildFilter()
	if err != nil {
		return err
	}
	prog := unix.SockFprog{Len: uint16(len(ins)), Filter: &ins[0]}
	defer runtime.KeepAlive(ins)
	// Each try sets no_new_privs on the thread it runs on, then installs;
	// EACCES means the goroutine moved to another thread in between: again.
	// A thread it set stays set, so the tries end with the threads.
	for range 64 {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("setting no_new_privs: %w", err)
		}
		_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
		if e == 0 {
			return nil
		}
		if e != unix.EACCES {
			return fmt.Errorf("installing the seccomp filter: %w", e)
		}
	}
	return errors.New("installing the seccomp filter: no_new_privs kept missing on the thread (EACCES)")
}
