package lab

// TB is the part of testing.TB the *T helpers use (BuildT, NewDumbbellT,
// AddLossT). A *testing.T or *testing.B is one; lab itself does
// not import testing, so the commands that build labs with it
// (cmd/fabricbench) do not link the test framework.
type TB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}
