package roce

import (
	"hash/crc32"
	"sync"
	"sync/atomic"
)

// A sender whose payload is zeros (roceperf's WRITEs without --verify, as
// perftest's cleared buffers) need not run the CRC over it: the zlib CRC's
// step for a zero byte, s -> table[byte(s)] ^ s>>8, is linear in the state
// s, so n zero bytes are one linear map Z^n of the 32-bit state. It is
// applied as four 256-entry tables, one per state byte: four loads in place
// of a pass over a kilobyte (about 6 % of the roceperf sender's CPU).

// maxZeroLengths bounds the cache of zero-run tables (4 KiB each): one per
// run length, and a sender has a handful (the path MTU, a message's last
// packet). Runs up to maxZeroRun bytes (a jumbo frame) are cached, indexed
// by length: a map lookup would cost a fifth of the saving.
const (
	maxZeroLengths = 64
	maxZeroRun     = 9216
)

// zeroRun is Z^n for one n: z[k][v] is Z^n of the state v<<(8k).
type zeroRun struct {
	z [4][256]uint32
}

var (
	zeroRuns      [maxZeroRun + 1]atomic.Pointer[zeroRun]
	zeroRunsMu    sync.Mutex // serializes adding to zeroRuns
	zeroRunsCount int        // under zeroRunsMu
	// zeroRunsFull is set once the cache holds maxZeroLengths: a length
	// it lacks then takes no lock (messages of random sizes end in ever
	// new lengths).
	zeroRunsFull atomic.Bool
	zeroBytes    [4096]byte
)

// zeroState runs the CRC's state s over n zero bytes the slow way.
func zeroState(s uint32, n int) uint32 {
	crc := ^s // crc32.Update takes and returns the inverted state
	for n > 0 {
		k := min(n, len(zeroBytes))
		crc = crc32.Update(crc, crc32.IEEETable, zeroBytes[:k])
		n -= k
	}
	return ^crc
}

// newZeroRun computes Z^n from the state's 32 unit vectors.
func newZeroRun(n int) *zeroRun {
	r := new(zeroRun)
	for k := range r.z {
		for bit := range 8 {
			r.z[k][1<<bit] = zeroState(1<<(8*k+bit), n)
		}
		for v := 1; v < 256; v++ {
			low := v & -v
			r.z[k][v] = r.z[k][low] ^ r.z[k][v^low]
		}
	}
	return r
}

// zeroRunFor returns the cached Z^n, adding it while the cache has room;
// nil when it is full or n is beyond maxZeroRun.
func zeroRunFor(n int) *zeroRun {
	if n > maxZeroRun {
		return nil
	}
	if r := zeroRuns[n].Load(); r != nil {
		return r
	}
	if zeroRunsFull.Load() {
		return nil
	}
	zeroRunsMu.Lock()
	defer zeroRunsMu.Unlock()
	if r := zeroRuns[n].Load(); r != nil {
		return r
	}
	if zeroRunsCount >= maxZeroLengths {
		return nil
	}
	r := newZeroRun(n)
	zeroRuns[n].Store(r)
	zeroRunsCount++
	zeroRunsFull.Store(zeroRunsCount >= maxZeroLengths)
	return r
}

// icrcZeros continues crc (zlib convention) over n zero bytes: equal to
// crc32.Update(crc, crc32.IEEETable, make([]byte, n)).
func icrcZeros(crc uint32, n int) uint32 {
	if n <= 0 {
		return crc
	}
	r := zeroRunFor(n)
	if r == nil {
		return ^zeroState(^crc, n) // a length the cache does not hold: the plain pass
	}
	z, s := &r.z, ^crc
	return ^(z[0][byte(s)] ^ z[1][byte(s>>8)] ^ z[2][byte(s>>16)] ^ z[3][byte(s>>24)])
}
