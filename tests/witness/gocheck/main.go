// Command gocheck verifies what attested-replay's log and witnesses publish with
// implementations the project did not write: golang.org/x/mod/sumdb/note (signed notes),
// github.com/transparency-dev/formats (checkpoints and cosignature/v1) and
// github.com/transparency-dev/merkle (RFC 6962 proofs). It reads one JSON request on stdin and
// prints "ok" (exit 0) or the first failure (exit 1). A test tool: never part of the product.
package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type request struct {
	LogKey         string   `json:"logKey"`
	WitnessKeys    []string `json:"witnessKeys"`
	Origin         string   `json:"origin"`
	Note           string   `json:"note"`
	OldSize        uint64   `json:"oldSize"`
	OldRoot        []byte   `json:"oldRoot"`
	Consistency    [][]byte `json:"consistency"`
	Leaf           []byte   `json:"leaf"`
	LeafIndex      uint64   `json:"leafIndex"`
	InclusionProof [][]byte `json:"inclusionProof"`
	// With TilesURL: read the checkpoint and tiles of a tlog-tiles log at that prefix (with
	// Token as a bearer token) and prove entry TileIndex from its tiles alone.
	TilesURL  string `json:"tilesURL"`
	Token     string `json:"token"`
	TileIndex int64  `json:"tileIndex"`
}

// tilePath is the tlog-tiles path of a tile: tile/<L>/<N>[.p/<W>], or tile/entries/... for
// level -1 (an entry bundle); N in groups of three digits, all but the last prefixed by x.
func tilePath(t tlog.Tile) string {
	n := fmt.Sprintf("%d", t.N)
	for len(n)%3 != 0 {
		n = "0" + n
	}
	var groups []string
	for i := 0; i < len(n); i += 3 {
		groups = append(groups, n[i:i+3])
	}
	for i := 0; i < len(groups)-1; i++ {
		groups[i] = "x" + groups[i]
	}
	level := fmt.Sprintf("%d", t.L)
	if t.L == -1 {
		level = "entries"
	}
	path := "tile/" + level + "/" + strings.Join(groups, "/")
	if t.W != 1<<t.H {
		path += fmt.Sprintf(".p/%d", t.W)
	}
	return path
}

type tileReader struct {
	base, token string
	client      *http.Client
}

func (r *tileReader) get(path string) ([]byte, error) {
	req, err := http.NewRequest("GET", r.base+"/"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return body, nil
}

func (r *tileReader) Height() int { return 8 }

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		data, err := r.get(tilePath(t))
		if err != nil {
			return nil, err
		}
		out[i] = data
	}
	return out, nil
}

func (r *tileReader) SaveTiles(tiles []tlog.Tile, data [][]byte) {}

func checkTiles(r request, logVerifier note.Verifier) error {
	reader := &tileReader{base: r.TilesURL, token: r.Token, client: &http.Client{Timeout: 30 * time.Second}}
	raw, err := reader.get("checkpoint")
	if err != nil {
		return err
	}
	cp, _, _, err := log.ParseCheckpoint(raw, r.Origin, logVerifier)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var hash tlog.Hash
	copy(hash[:], cp.Hash)
	tree := tlog.Tree{N: int64(cp.Size), Hash: hash}
	hashes := tlog.TileHashReader(tree, reader)
	recordProof, err := tlog.ProveRecord(tree.N, r.TileIndex, hashes)
	if err != nil {
		return fmt.Errorf("proof from tiles: %w", err)
	}
	// The entry itself, from its entry bundle: its record hash must be the proven leaf.
	bundle := tlog.Tile{H: 8, L: -1, N: r.TileIndex / 256, W: 256}
	if rest := tree.N - bundle.N*256; rest < 256 {
		bundle.W = int(rest)
	}
	data, err := reader.get(tilePath(bundle))
	if err != nil {
		return err
	}
	var entry []byte
	for i := int64(0); i <= r.TileIndex%256; i++ {
		if len(data) < 2 {
			return fmt.Errorf("entry bundle ends before entry %d", i)
		}
		size := int(binary.BigEndian.Uint16(data))
		if len(data) < 2+size {
			return fmt.Errorf("entry bundle truncated at entry %d", i)
		}
		entry, data = data[2:2+size], data[2+size:]
	}
	if err := tlog.CheckRecord(recordProof, tree.N, tree.Hash, r.TileIndex, tlog.RecordHash(entry)); err != nil {
		return fmt.Errorf("inclusion of entry %d from tiles: %w", r.TileIndex, err)
	}
	return nil
}

func check(r request) error {
	logVerifier, err := note.NewVerifier(r.LogKey)
	if err != nil {
		return fmt.Errorf("log key: %w", err)
	}
	if r.TilesURL != "" {
		return checkTiles(r, logVerifier)
	}
	var witnesses []note.Verifier
	for _, key := range r.WitnessKeys {
		w, err := fnote.NewVerifierForCosignatureV1(key)
		if err != nil {
			return fmt.Errorf("witness key %q: %w", key, err)
		}
		witnesses = append(witnesses, w)
	}
	cp, _, n, err := log.ParseCheckpoint([]byte(r.Note), r.Origin, logVerifier, witnesses...)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	for _, w := range witnesses {
		found := false
		for _, sig := range n.Sigs {
			if sig.Name == w.Name() && sig.Hash == w.KeyHash() {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no verified cosignature by %s", w.Name())
		}
	}
	if r.OldSize > 0 {
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, r.OldSize, cp.Size, r.Consistency, r.OldRoot, cp.Hash); err != nil {
			return fmt.Errorf("consistency %d -> %d: %w", r.OldSize, cp.Size, err)
		}
	}
	if r.Leaf != nil {
		leafHash := rfc6962.DefaultHasher.HashLeaf(r.Leaf)
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.LeafIndex, cp.Size, leafHash, r.InclusionProof, cp.Hash); err != nil {
			return fmt.Errorf("inclusion of leaf %d: %w", r.LeafIndex, err)
		}
	}
	return nil
}

func main() {
	var r request
	if err := json.NewDecoder(os.Stdin).Decode(&r); err != nil {
		fmt.Println("request:", err)
		os.Exit(1)
	}
	if err := check(r); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Println("ok")
}
