// Package archtest holds the test that keeps Switchyard's dependency rules
// (see the layout notes in the repository's docs): thin mains, one wiring
// package per binary, gateway and agent apart, and the pure packages free of
// I/O libraries.
package archtest
