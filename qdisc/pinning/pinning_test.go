package pinning

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRecord: a record is written atomically beside its pins' name, read
// back as written, and Remove takes the pins and the record, nothing else.
func TestRecord(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(t.TempDir(), "ns4026531840_eth0")
	if err := os.MkdirAll(filepath.Join(dir, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got, want := RecordPath(root, dir), filepath.Join(root, "ns4026531840_eth0.json"); got != want {
		t.Errorf("RecordPath %s, want %s", got, want)
	}
	type rec struct{ Dev string }
	if err := WriteRecord(root, dir, rec{Dev: "eth0"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(RecordPath(root, dir))
	var got rec
	if err != nil || json.Unmarshal(b, &got) != nil || got.Dev != "eth0" {
		t.Fatalf("record %q: %v", b, err)
	}
	if _, err := os.Stat(RecordPath(root, dir) + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary record left: %v", err)
	}
	other := filepath.Join(root, "other.json")
	if err := os.WriteFile(other, []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(root, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("pins left: %v", err)
	}
	if _, err := os.Stat(RecordPath(root, dir)); !os.IsNotExist(err) {
		t.Errorf("record left: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another record went: %v", err)
	}
	// Nothing left to remove is not an error.
	if err := Remove(root, dir); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if Orphaned(nil) {
		t.Error("no links called orphaned")
	}
}
