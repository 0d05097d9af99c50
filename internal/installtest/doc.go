// Package installtest holds the tests of scripts/install-node.sh. Each test
// runs the script in a throwaway home and root, with stand-ins for the
// commands it drives (systemctl, journalctl, launchctl, ollama, curl,
// uname, id, …) first on PATH and only a short list of harmless real tools
// behind them, so that it can touch nothing outside the sandbox. The
// stand-ins live in testdata/standins; the agent is a stand-in script too,
// published with its SHA-256 in a checksums.txt that the curl stand-in
// serves, except where a test needs the real agent's doctor.
package installtest
