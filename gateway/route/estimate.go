package route

// EstimateTokens approximates how many tokens text costs, for the places
// that need a number before (or without) the upstream's count: the context
// window filter, and metering when the upstream reports no usage (such
// counts are marked as estimated).
//
// ASCII bytes count four to a token, the usual rule of thumb for English
// and code under BPE tokenizers; every non-ASCII character counts as a whole
// token, because CJK and other scripts run close to one token per character
// and bytes/4 would undercount them by a quarter or more. Accented Latin is
// overcounted instead, which is the safer error for a context-window check.
// Non-empty text is at least one token. It reads the bytes once and
// allocates nothing.
func EstimateTokens(text string) int {
	ascii, other := 0, 0
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case c < 0x80:
			ascii++
		case c&0xC0 != 0x80: // the lead byte of a multi-byte character; continuation bytes are not counted
			other++
		}
	}
	n := (ascii+3)/4 + other
	if n == 0 && len(text) > 0 {
		n = 1 // only stray continuation bytes: still something
	}
	return n
}
