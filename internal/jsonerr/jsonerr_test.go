package jsonerr_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/specula-dev/specula/internal/jsonerr"
)

type config struct {
	Architectures []string `json:"architectures"`
	HiddenSize    *int     `json:"hidden_size"`
	Eps           float64  `json:"rms_norm_eps"`
	Tie           bool     `json:"tie_word_embeddings"`
	Layers        []uint   `json:"layer_ids"`
	DFlash        *struct {
		BlockSize int `json:"block_size"`
	} `json:"dflash_config"`
}

func TestExplain(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"string for an int", "{\n  \"hidden_size\": \"64\"\n}", `line 2, column 21: field "hidden_size" is a string, want an integer`},
		{"fraction for an int", `{"hidden_size": 2.5}`, `line 1, column 19: field "hidden_size" is 2.5, want an integer`},
		{"nested field", `{"dflash_config": {"block_size": true}}`, `line 1, column 37: field "dflash_config.block_size" is true or false, want an integer`},
		{"list element", `{"architectures": ["A", 3]}`, `line 1, column 25: field "architectures" is a number, want a string`},
		{"object for a list", `{"layer_ids": {}}`, `line 1, column 15: field "layer_ids" is an object, want a list of non-negative integers`},
		{"string for a bool", `{"tie_word_embeddings": "yes"}`, `line 1, column 29: field "tie_word_embeddings" is a string, want true or false`},
		{"not an object", `[1, 2]`, `line 1, column 1: the document is a list, want an object`},
		{"syntax", "{\n  \"hidden_size\": 64,\n}", `line 3, column 1: not valid JSON: invalid character '}' looking for beginning of object key string`},
		{"truncated", `{"architectures": ["A",`, `line 1, column 24: not valid JSON: unexpected end of JSON input (the file ends early: truncated?)`},
		// Editors on Windows save one; Python's json refuses it as well.
		{"byte order mark", "\ufeff{\"hidden_size\": 64}", `line 1, column 1: not valid JSON: the file starts with a UTF-8 byte order mark (EF BB BF), which JSON does not allow: save it without one`},
		{"truncated after a newline", "{\n  \"architectures\": [\"A\",\n", `line 3, column 1: not valid JSON: unexpected end of JSON input (the file ends early: truncated?)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var cfg config
			raw := json.Unmarshal([]byte(c.doc), &cfg)
			if raw == nil {
				t.Fatal("the document decoded")
			}
			err := jsonerr.Explain([]byte(c.doc), raw)
			if err.Error() != c.want {
				t.Fatalf("%q\nwant %q\n(json: %v)", err, c.want, raw)
			}
			var je *jsonerr.Error
			if !errors.As(err, &je) || !errors.Is(err, raw) {
				t.Fatalf("%v does not unwrap to json's error", err)
			}
		})
	}
	other := errors.New("read failed")
	if jsonerr.Explain(nil, other) != other {
		t.Fatal("an error that is not json's was changed")
	}
}
