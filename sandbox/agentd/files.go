package agentd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/harvest-dev/harvest/sandbox/proto"
)

// resolve makes a path absolute (relative to the workdir) and clean. The agent
// runs inside the box, so there is nothing outside to escape to: resolution is
// the kernel's, in the box's mount namespace.
func (s *Server) resolve(p string) (string, error) {
	if p == "" {
		return "", &proto.Error{Code: proto.CodeInvalid, Message: "empty path"}
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", &proto.Error{Code: proto.CodeInvalid, Message: "path contains a NUL byte"}
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.id().workdir, p)
	}
	return filepath.Clean(p), nil
}

func (s *Server) readFile(prm proto.ReadParams) (any, []byte, error) {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return nil, nil, err
	}
	if prm.Offset < 0 || prm.Length < 0 {
		return nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: "read: negative offset or length"}
	}
	length := prm.Length
	if length == 0 || length > proto.ChunkSize {
		length = proto.ChunkSize
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, errno(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, errno(err)
	}
	if fi.IsDir() {
		return nil, nil, &proto.Error{Code: proto.CodeIsDir, Message: fmt.Sprintf("read %s: is a directory", path)}
	}
	if !fi.Mode().IsRegular() {
		// Devices and fifos could block forever or never end.
		return nil, nil, &proto.Error{Code: proto.CodeInvalid, Message: fmt.Sprintf("read %s: not a regular file (%s)", path, fi.Mode().Type())}
	}
	buf := make([]byte, length)
	n, err := f.ReadAt(buf, prm.Offset)
	if err != nil && err != io.EOF {
		return nil, nil, errno(err)
	}
	eof := prm.Offset+int64(n) >= fi.Size()
	return proto.ReadReply{Size: fi.Size(), EOF: eof}, buf[:n], nil
}

func (s *Server) writeFile(prm proto.WriteParams, data []byte) (proto.WriteReply, error) {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return proto.WriteReply{}, err
	}
	if prm.Offset < 0 {
		return proto.WriteReply{}, &proto.Error{Code: proto.CodeInvalid, Message: "write: negative offset"}
	}
	if prm.MkdirAll {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return proto.WriteReply{}, errno(err)
		}
	}
	flags := os.O_WRONLY
	if prm.Create {
		flags |= os.O_CREATE
	}
	if prm.Append {
		flags |= os.O_APPEND
	}
	mode := os.FileMode(prm.Mode) & os.ModePerm
	if mode == 0 {
		mode = 0o644
	}
	f, err := os.OpenFile(path, flags, mode)
	if err != nil {
		return proto.WriteReply{}, errno(err)
	}
	defer f.Close()
	var n int
	if prm.Append {
		n, err = f.Write(data)
	} else {
		n, err = f.WriteAt(data, prm.Offset)
	}
	if err != nil {
		return proto.WriteReply{Written: int64(n)}, errno(err)
	}
	if prm.Truncate {
		if err := f.Truncate(prm.Offset + int64(n)); err != nil {
			return proto.WriteReply{Written: int64(n)}, errno(err)
		}
	}
	if err := f.Close(); err != nil {
		return proto.WriteReply{Written: int64(n)}, errno(err)
	}
	return proto.WriteReply{Written: int64(n)}, nil
}

func fileInfo(name string, fi fs.FileInfo, linkPath string) proto.FileInfo {
	out := proto.FileInfo{Name: name, Size: fi.Size(), Mode: uint32(fi.Mode()), ModTime: fi.ModTime()}
	if fi.Mode()&fs.ModeSymlink != 0 && linkPath != "" {
		out.Link, _ = os.Readlink(linkPath)
	}
	return out
}

func (s *Server) stat(prm proto.PathParams) (proto.FileInfo, error) {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return proto.FileInfo{}, err
	}
	var fi fs.FileInfo
	if prm.NoFollow {
		fi, err = os.Lstat(path)
	} else {
		fi, err = os.Stat(path)
	}
	if err != nil {
		return proto.FileInfo{}, errno(err)
	}
	return fileInfo(filepath.Base(path), fi, path), nil
}

func (s *Server) list(prm proto.ListParams) (proto.ListReply, error) {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return proto.ListReply{}, err
	}
	limit := prm.Limit
	if limit <= 0 {
		limit = 10000
	}
	d, err := os.Open(path)
	if err != nil {
		return proto.ListReply{}, errno(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return proto.ListReply{}, errno(err)
	}
	sort.Strings(names)
	var out proto.ListReply
	out.Entries = []proto.FileInfo{}
	for _, n := range names {
		if len(out.Entries) == limit {
			out.Truncated = true
			break
		}
		full := filepath.Join(path, n)
		fi, err := os.Lstat(full)
		if err != nil {
			continue // removed while listing
		}
		out.Entries = append(out.Entries, fileInfo(n, fi, full))
	}
	return out, nil
}

func (s *Server) remove(prm proto.RemoveParams) error {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return err
	}
	if path == "/" {
		return &proto.Error{Code: proto.CodeInvalid, Message: "refusing to remove /"}
	}
	if prm.Recursive {
		if _, err := os.Lstat(path); err != nil {
			return errno(err)
		}
		return errno(os.RemoveAll(path))
	}
	return errno(os.Remove(path))
}

func (s *Server) mkdir(prm proto.MkdirParams) error {
	path, err := s.resolve(prm.Path)
	if err != nil {
		return err
	}
	mode := os.FileMode(prm.Mode) & os.ModePerm
	if mode == 0 {
		mode = 0o755
	}
	if prm.Parents {
		return errno(os.MkdirAll(path, mode))
	}
	return errno(os.Mkdir(path, mode))
}

func (s *Server) rename(prm proto.RenameParams) error {
	from, err := s.resolve(prm.From)
	if err != nil {
		return err
	}
	to, err := s.resolve(prm.To)
	if err != nil {
		return err
	}
	return errno(os.Rename(from, to))
}

// errno turns a Go error into a proto.Error with a code the host can branch on.
// nil stays nil.
func errno(err error) error {
	if err == nil {
		return nil
	}
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe
	}
	return &proto.Error{Code: codeOf(err), Message: err.Error()}
}

func codeOf(err error) string {
	var en syscall.Errno
	if errors.As(err, &en) {
		switch en {
		case syscall.ENOENT:
			return proto.CodeNotFound
		case syscall.EEXIST:
			return proto.CodeExists
		case syscall.EACCES, syscall.EPERM, syscall.EROFS:
			return proto.CodePermission
		case syscall.EISDIR:
			return proto.CodeIsDir
		case syscall.ENOTDIR:
			return proto.CodeNotDir
		case syscall.ENOTEMPTY:
			return proto.CodeNotEmpty
		case syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP:
			return proto.CodeInvalid
		case syscall.EAGAIN, syscall.ENOMEM, syscall.EMFILE, syscall.ENFILE, syscall.ENOSPC, syscall.EDQUOT:
			return proto.CodeResource
		case syscall.EFBIG:
			return proto.CodeTooLarge
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return proto.CodeNotFound
	case errors.Is(err, fs.ErrExist):
		return proto.CodeExists
	case errors.Is(err, fs.ErrPermission):
		return proto.CodePermission
	}
	return proto.CodeInternal
}

func toProtoError(err error) *proto.Error {
	var pe *proto.Error
	if errors.As(err, &pe) {
		return pe
	}
	return &proto.Error{Code: codeOf(err), Message: err.Error()}
}
