// Command gocheck verifies what attested-replay's log and witnesses publish with
// implementations the project did not write: golang.org/x/mod/sumdb/note (signed notes),
// github.com/transparency-dev/formats (checkpoints and cosignature/v1) and
// github.com/transparency-dev/merkle (RFC 6962 proofs). It reads one JSON request on stdin and
// prints "ok" (exit 0) or the first failure (exit 1). A test tool: never part of the product.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/transparency-dev/formats/log"
	fnote "github.com/transparency-dev/formats/note"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"
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
}

func check(r request) error {
	logVerifier, err := note.NewVerifier(r.LogKey)
	if err != nil {
		return fmt.Errorf("log key: %w", err)
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
