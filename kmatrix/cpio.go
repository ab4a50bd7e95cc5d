package kmatrix

import (
	"fmt"
	"io"
	"path"
	"strings"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks an initramfs from
// (Documentation/driver-api/early-userspace/buffer-format.rst): a 110-byte ASCII
// header per entry, the NUL-terminated name, the data, each padded to 4 bytes, and
// an entry named TRAILER!!! at the end.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	off int64
	err error
}

func newCPIOWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w, ino: 1} }

const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one entry; name is relative to the image's root ("bin/sh").
func (c *cpioWriter) entry(name string, mode uint32, data []byte) error {
	name = strings.TrimPrefix(path.Clean("/"+name), "/")
	if name == "" {
		name = "."
	}
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	c.ino++
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
	return c.err
}

// Dir adds a directory with the given permission bits.
func (c *cpioWriter) Dir(name string, perm uint32) error { return c.entry(name, cpioDir|perm, nil) }

// File adds a regular file.
func (c *cpioWriter) File(name string, perm uint32, data []byte) error {
	return c.entry(name, cpioFile|perm, data)
}

// Symlink adds a symbolic link to target.
func (c *cpioWriter) Symlink(name, target string) error {
	return c.entry(name, cpioSymlink|0o777, []byte(target))
}

// Close writes the trailer. It does not close the underlying writer.
func (c *cpioWriter) Close() error {
	c.ino = 0
	return c.entry("TRAILER!!!", 0, nil)
}
