package dctcp

import (
	"math"
	"strings"
	"testing"
)

// TestUpdateAlpha walks RFC 8257 §3.3's α ← (1 − g)·α + g·F with g = 1/16
// in Linux's fixed point, step by step.
func TestUpdateAlpha(t *testing.T) {
	p := DefaultParams()
	for _, tc := range []struct {
		name          string
		alpha         Alpha
		delivered, ce uint32
		want          Alpha
	}{
		{"no marks: α·15/16", 1024, 10, 0, 960},
		{"again", 960, 10, 0, 900},
		{"all marked stays 1", 1024, 10, 10, 1024},
		{"half marked from 0: g·F = 32", 0, 10, 5, 32},
		{"half marked at the fixed point 1/2", 512, 20, 10, 512},
		{"one in a hundred", 0, 100, 1, 0}, // (1 << 6) / 100 = 0: below Linux's resolution
		{"one in sixty-four", 0, 64, 1, 1}, // (1 << 6) / 64
		{"below 16 decays to 0, not 15", 15, 10, 0, 0},
		{"16 decays by 1", 16, 10, 0, 15},
		{"capped at 1", 1024, 3, 3, 1024},
		{"nothing delivered, CE counted", 100, 0, 1, 100 - 6 + 64},
	} {
		if got := UpdateAlpha(p, tc.alpha, tc.delivered, tc.ce); got != tc.want {
			t.Errorf("%s: UpdateAlpha(%d, %d/%d) = %d, want %d", tc.name, tc.alpha, tc.ce, tc.delivered, got, tc.want)
		}
	}
}

// TestAlphaConverges: with every packet marked, α after n windows from 0
// is 1 − (15/16)^n (RFC 8257 §3.3's EWMA) within Linux's truncation, and
// with a constant F it settles at F.
func TestAlphaConverges(t *testing.T) {
	p := DefaultParams()
	a := Alpha(0)
	for n := 1; n <= 60; n++ {
		a = UpdateAlpha(p, a, 16, 16)
		want := 1 - math.Pow(15.0/16, float64(n))
		if d := a.Float() - want; math.Abs(d) > float64(n)/1024 {
			t.Fatalf("window %d: α %.4f, want %.4f (EWMA)", n, a.Float(), want)
		}
	}
	for _, f := range []struct{ ce, of uint32 }{{1, 4}, {1, 2}, {3, 4}, {1, 10}} {
		a := MaxAlpha
		for range 200 {
			a = UpdateAlpha(p, a, f.of, f.ce)
		}
		if want := float64(f.ce) / float64(f.of); math.Abs(a.Float()-want) > 0.02 {
			t.Errorf("F = %d/%d: α settles at %.4f, want %.4f", f.ce, f.of, a.Float(), want)
		}
	}
}

// TestSSThresh: cwnd × (1 − α/2) on an ECE, cwnd/2 on a loss, at least 2.
func TestSSThresh(t *testing.T) {
	for _, tc := range []struct {
		cwnd  uint32
		alpha Alpha
		want  uint32
	}{
		{100, 1024, 50}, {100, 512, 75}, {100, 0, 100}, {100, 64, 97}, {3, 1024, 2}, {2, 1024, 2}, {1, 0, 2},
	} {
		if got := SSThresh(tc.cwnd, tc.alpha); got != tc.want {
			t.Errorf("SSThresh(%d, %d) = %d, want %d", tc.cwnd, tc.alpha, got, tc.want)
		}
	}
	if LossSSThresh(101) != 50 || LossSSThresh(3) != 2 {
		t.Errorf("LossSSThresh: %d, %d", LossSSThresh(101), LossSSThresh(3))
	}
	s := NewSender(DefaultParams(), SenderSnapshot{})
	if got := s.SSThresh(80); got != 40 || s.UndoCwnd(40) != 80 || s.UndoCwnd(90) != 90 {
		t.Errorf("SSThresh(80) = %d (α 1), undo to %d", got, s.UndoCwnd(40))
	}
	if got := s.OnLoss(60); got != 30 || s.UndoCwnd(30) != 60 {
		t.Errorf("OnLoss(60) = %d, undo to %d", got, s.UndoCwnd(30))
	}
}

// TestSenderWindows: a window ends when snd_una reaches the snd_nxt it
// started at, across the sequence-number wrap, and α moves once per window.
func TestSenderWindows(t *testing.T) {
	p := DefaultParams()
	start := uint32(math.MaxUint32 - 3000)
	s := NewSender(p, SenderSnapshot{SndUna: start, SndNxt: start + 1000})
	steps := []struct {
		snap SenderSnapshot
		end  bool
		w    Window
	}{
		{SenderSnapshot{SndUna: start + 500, SndNxt: start + 4000, Delivered: 1}, false, Window{}},
		{SenderSnapshot{SndUna: start + 1000, SndNxt: start + 5000, Delivered: 2, DeliveredCE: 1}, true,
			Window{Delivered: 2, DeliveredCE: 1, AlphaBefore: 1024, Alpha: 1024 - 64 + 32}},
		// the next window runs to start + 5000, past the wrap
		{SenderSnapshot{SndUna: start + 4999, SndNxt: start + 9000, Delivered: 6, DeliveredCE: 1}, false, Window{}},
		{SenderSnapshot{SndUna: start + 5000, SndNxt: start + 9000, Delivered: 8, DeliveredCE: 1}, true,
			Window{Delivered: 6, DeliveredCE: 0, AlphaBefore: 992, Alpha: 992 - 62}},
	}
	for i, st := range steps {
		w, end := s.OnAck(st.snap)
		if end != st.end || w != st.w {
			t.Fatalf("step %d: window %+v ended %v, want %+v %v", i, w, end, st.w, st.end)
		}
	}
	if s.Alpha() != 930 {
		t.Errorf("α %d, want 930", s.Alpha())
	}
}

// TestReceiverCEStateMachine walks RFC 8257 §3.2: ECE follows the CE state
// of the last segment; a change ACKs at once, after flushing a delayed ACK
// for the old state's segments with the old ECE.
func TestReceiverCEStateMachine(t *testing.T) {
	r := NewReceiver(1000)
	steps := []struct {
		ce      bool
		rcvNxt  uint32
		pending bool
		want    ReceiverAction
	}{
		{false, 1000, false, ReceiverAction{}},
		{false, 2000, true, ReceiverAction{}}, // same state: the ACK may be delayed
		{true, 3000, true, ReceiverAction{FlushDelayedAck: true, FlushAckSeq: 2000, FlushECE: false, AckNow: true, ECE: true}},
		{true, 4000, true, ReceiverAction{ECE: true}},
		{true, 5000, false, ReceiverAction{ECE: true}},
		{false, 6000, false, ReceiverAction{AckNow: true}}, // nothing delayed: only the immediate ACK
		{true, 7000, true, ReceiverAction{FlushDelayedAck: true, FlushAckSeq: 6000, AckNow: true, ECE: true}},
		{false, 8000, true, ReceiverAction{FlushDelayedAck: true, FlushAckSeq: 7000, FlushECE: true, AckNow: true}},
	}
	for i, st := range steps {
		if got := r.OnSegment(st.ce, st.rcvNxt, st.pending); got != st.want {
			t.Errorf("step %d (ce %v, pending %v): %+v, want %+v", i, st.ce, st.pending, got, st.want)
		}
	}
}

func TestParamsValidate(t *testing.T) {
	if err := DefaultParams().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    Params
		want string
	}{
		{Params{ShiftG: 11, AlphaOnInit: 1024}, "dctcp_shift_g 11 out of range [0, 10]"},
		{Params{ShiftG: 4, AlphaOnInit: 1025}, "dctcp_alpha_on_init 1025 out of range [0, 1024]"},
	} {
		if err := tc.p.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.p, err, tc.want)
		}
	}
}
