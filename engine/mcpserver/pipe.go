package mcpserver

import (
	"io"
	"sync"
)

// answerPipe carries an in-process handler's answer to its reader as
// io.Pipe does: each write returns once the reader has read its bytes, a
// reader's Close fails the writes (io.ErrClosedPipe), the writer's close
// ends the reads (io.EOF, or its error). A kept write's bytes (WriteKept,
// httpx.KeptWriter: bytes their writer never changes again) are handed
// on as they are to a reader that keeps them (readPieces): a page's
// content reaches the tool that answers it without a copy. One writer
// and one reader, each on its own goroutine.
type answerPipe struct {
	wrMu  sync.Mutex    // one write at a time
	wrCh  chan piece    // a write, to the reader
	rdCh  chan struct{} // the write was read whole (or kept)
	done  chan struct{} // closed by the reader's Close
	once  sync.Once
	ended chan struct{} // closed by the writer's close, after werr is set
	werr  error

	cur []byte // the reader's: the rest of the write being read
}

// piece is one write.
type piece struct {
	b    []byte
	kept bool
}

func newAnswerPipe() *answerPipe {
	return &answerPipe{wrCh: make(chan piece), rdCh: make(chan struct{}), done: make(chan struct{}), ended: make(chan struct{})}
}

// write hands b to the reader and returns once it has read it (or kept
// it).
func (p *answerPipe) write(b []byte, kept bool) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.wrMu.Lock()
	defer p.wrMu.Unlock()
	select {
	case p.wrCh <- piece{b: b, kept: kept}:
	case <-p.done:
		return 0, io.ErrClosedPipe
	}
	select {
	case <-p.rdCh:
		return len(b), nil
	case <-p.done:
		return 0, io.ErrClosedPipe
	}
}

// closeWrite ends the answer: the reader reads err after the bytes
// written (io.EOF if nil). Called once, by the writer, after its last
// write.
func (p *answerPipe) closeWrite(err error) {
	if err == nil {
		err = io.EOF
	}
	p.werr = err
	close(p.ended)
}

// recv waits for the next write.
func (p *answerPipe) recv() (piece, error) {
	select {
	case pc := <-p.wrCh:
		return pc, nil
	case <-p.ended: // the writer closes after its last write has been read
		return piece{}, p.werr
	case <-p.done:
		return piece{}, io.ErrClosedPipe
	}
}

// Read reads the answer's bytes, kept or not, as io.Pipe's reader does.
func (p *answerPipe) Read(b []byte) (int, error) {
	if len(p.cur) == 0 {
		pc, err := p.recv()
		if err != nil {
			return 0, err
		}
		p.cur = pc.b
	}
	n := copy(b, p.cur)
	if p.cur = p.cur[n:]; len(p.cur) == 0 {
		p.ack()
	}
	return n, nil
}

// ack tells the writer its write was read whole, unless the reader has
// closed the pipe meanwhile (the writer has then failed).
func (p *answerPipe) ack() {
	select {
	case p.rdCh <- struct{}{}:
	case <-p.done:
	}
}

// Close fails the writes to come and any waiting.
func (p *answerPipe) Close() error {
	p.once.Do(func() { close(p.done) })
	return nil
}

// keptPiece is the bytes of a kept write, and where they lie in the
// answer: at buf's length when they came (readPieces).
type keptPiece struct {
	at int
	b  []byte
}

// readPieces reads the answer to its end, at most limit bytes (more is
// errTooLong): it appends the bytes of its writes to buf, but those of
// its kept writes, which it keeps as they are, each with where it would
// begin in buf. Not after Read.
func (p *answerPipe) readPieces(buf []byte, limit int) ([]byte, []keptPiece, error) {
	var kept []keptPiece
	n := 0
	for {
		pc, err := p.recv()
		if err == io.EOF {
			return buf, kept, nil
		}
		if err != nil {
			return buf, kept, err
		}
		if n += len(pc.b); n > limit {
			p.ack()
			return buf, kept, errTooLong
		}
		if pc.kept {
			kept = append(kept, keptPiece{at: len(buf), b: pc.b})
		} else {
			buf = append(buf, pc.b...)
		}
		p.ack()
	}
}
