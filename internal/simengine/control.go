package simengine

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Duration is a time.Duration in JSON: written as a Go duration string
// ("250ms"), read from one or from a number of milliseconds, so that a shell
// script can post {"ttft": 250}.
type Duration time.Duration

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string or a number of milliseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		*d = Duration(v)
		return nil
	}
	ms, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("duration must be a string such as \"250ms\" or a number of milliseconds, got %s", b)
	}
	*d = Duration(ms * float64(time.Millisecond))
	return nil
}

// Knobs are the run-time settings that POST /sim/config takes and GET
// /sim/config reports. In a POST an absent field leaves its setting alone.
type Knobs struct {
	TPS            *float64  `json:"tps,omitempty"`
	TTFT           *Duration `json:"ttft,omitempty"`
	TTFTPer1kInput *Duration `json:"ttft_per_1k_input,omitempty"`
	Latency        *Duration `json:"latency,omitempty"`
	FailRate       *float64  `json:"fail_rate,omitempty"`
	Slots          *int      `json:"slots,omitempty"`
	// Reject429 opens a 429 window (see Engine.Reject429); when read, For is
	// what is left of the current window.
	Reject429 *Reject429Knob `json:"reject_429,omitempty"`
	// StallAfter is Engine.StallAfter; For 0 turns stalling off.
	StallAfter *StallKnob `json:"stall_after,omitempty"`
	// CutAfter is Engine.CutAfter; -1 turns cutting off.
	CutAfter *int `json:"cut_after,omitempty"`
}

// Reject429Knob is the argument of Engine.Reject429.
type Reject429Knob struct {
	For        Duration `json:"for"`
	RetryAfter Duration `json:"retry_after"`
}

// StallKnob is the argument of Engine.StallAfter.
type StallKnob struct {
	Chunks int      `json:"chunks"`
	For    Duration `json:"for"`
}

// Knobs reports every current setting.
func (e *Engine) Knobs() Knobs {
	k, _ := e.snapshot()
	d := func(v time.Duration) *Duration { x := Duration(v); return &x }
	remaining := max(time.Until(k.rejectUntil), 0)
	return Knobs{
		TPS:            &k.tps,
		TTFT:           d(k.ttft),
		TTFTPer1kInput: d(k.ttftPer1k),
		Latency:        d(k.latency),
		FailRate:       &k.failRate,
		Slots:          &k.slots,
		Reject429:      &Reject429Knob{For: Duration(remaining), RetryAfter: Duration(k.retryAfter)},
		StallAfter:     &StallKnob{Chunks: k.stallAfter, For: Duration(k.stallFor)},
		CutAfter:       &k.cutAfter,
	}
}

// Apply changes the settings present in kn, all at once, or none of them if
// any is out of range.
func (e *Engine) Apply(kn Knobs) error {
	var errs []error
	nonNegative := func(name string, d *Duration) {
		if d != nil && *d < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative", name))
		}
	}
	if kn.TPS != nil && *kn.TPS < 0 {
		errs = append(errs, errors.New("tps must not be negative"))
	}
	nonNegative("ttft", kn.TTFT)
	nonNegative("ttft_per_1k_input", kn.TTFTPer1kInput)
	nonNegative("latency", kn.Latency)
	if kn.FailRate != nil && (*kn.FailRate < 0 || *kn.FailRate > 1) {
		errs = append(errs, errors.New("fail_rate must be between 0 and 1"))
	}
	if kn.Slots != nil && *kn.Slots < 0 {
		errs = append(errs, errors.New("slots must not be negative (0 means unlimited)"))
	}
	if kn.Reject429 != nil {
		nonNegative("reject_429.retry_after", &kn.Reject429.RetryAfter)
	}
	if kn.StallAfter != nil {
		if kn.StallAfter.Chunks < 0 {
			errs = append(errs, errors.New("stall_after.chunks must not be negative"))
		}
		nonNegative("stall_after.for", &kn.StallAfter.For)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	e.setKnob(func(k *knobs) {
		if kn.TPS != nil {
			k.tps = *kn.TPS
		}
		if kn.TTFT != nil {
			k.ttft = time.Duration(*kn.TTFT)
		}
		if kn.TTFTPer1kInput != nil {
			k.ttftPer1k = time.Duration(*kn.TTFTPer1kInput)
		}
		if kn.Latency != nil {
			k.latency = time.Duration(*kn.Latency)
		}
		if kn.FailRate != nil {
			k.failRate = *kn.FailRate
		}
		if kn.Slots != nil {
			k.slots = *kn.Slots
		}
		if r := kn.Reject429; r != nil {
			k.rejectUntil = time.Time{}
			if r.For > 0 {
				k.rejectUntil = time.Now().Add(time.Duration(r.For))
				k.retryAfter = time.Duration(r.RetryAfter)
			}
		}
		if s := kn.StallAfter; s != nil {
			k.stallAfter, k.stallFor = s.Chunks, time.Duration(s.For)
		}
		if kn.CutAfter != nil {
			k.cutAfter = max(*kn.CutAfter, -1)
		}
	})
	return nil
}

func (e *Engine) handleControl(w http.ResponseWriter, r *http.Request) {
	var kn Knobs
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields() // a misspelt knob must not be silently ignored
	if err := dec.Decode(&kn); err != nil {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", "invalid knobs: "+err.Error())
		return
	}
	if err := e.Apply(kn); err != nil {
		writeError(w, http.StatusBadRequest, errTypeInvalid, "invalid_request", err.Error())
		return
	}
	applied, _ := json.Marshal(kn)
	e.logger.Info("knobs changed", "knobs", string(applied))
	writeJSON(w, http.StatusOK, e.Knobs())
}
