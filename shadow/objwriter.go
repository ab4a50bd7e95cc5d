package shadow

import "fmt"

// objectWriter writes loose objects on a goroutine of its own, for a caller that
// needs their ids at once but their files only before it names them where others
// read (a staging in place: the index it renames into place). The caller waits
// for it (wait) before that, and on every path.
type objectWriter struct {
	s    *Store
	jobs chan looseObject
	done chan struct{}
	err  error // the first write that failed; read after done
}

type looseObject struct {
	id string
	z  []byte
}

func (s *Store) startObjectWriter() *objectWriter {
	w := &objectWriter{s: s, jobs: make(chan looseObject, 64), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for o := range w.jobs {
			if w.err != nil || s.haveObject(o.id) {
				continue
			}
			w.err = s.putObject(o.id, o.z)
		}
	}()
	return w
}

// put returns the id of the object of kind with body and has it written; body is
// not kept (its zlib stream is a copy), so the caller may reuse it at once.
func (w *objectWriter) put(kind string, body []byte) (string, error) {
	hdr, id := objectID(kind, body)
	if len(hdr)+len(body) > storedMax && w.s.haveObject(id) {
		return id, nil // not compressed for nothing
	}
	z, err := deflateObject(hdr, body)
	if err != nil {
		return "", fmt.Errorf("shadow: compress object: %w", err)
	}
	w.jobs <- looseObject{id: id, z: z}
	return id, nil
}

// wait returns once every object put is written, with the first error; it may be
// called again (and put no more after it).
func (w *objectWriter) wait() error {
	select {
	case <-w.done:
	default:
		close(w.jobs)
		<-w.done
	}
	return w.err
}
