package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/switchyard-ai/switchyard/agent/engine"
)

// config is every setting of the agent. Each one is a flag and a SWITCHYARD_*
// environment variable; flags win.
type config struct {
	Gateway      string // gRPC host:port
	NodeID       string
	Key          string // the node key; never logged or printed
	Engine       string // one of engine.Kinds()
	EngineURL    string
	EngineAPIKey string
	Listen       string
	// AdvertiseURL is the front's base URL as the gateway reaches it, when
	// the operator set it; else advertiseHost (with the front's port) or the
	// tunnel's address is advertised.
	AdvertiseURL    string
	Slots           int
	Models          []string
	TLS             bool
	ShutdownTimeout time.Duration
	Expose          string // "" or "cloudflared"
	LogFormat       string
	LogLevel        slog.Level

	// advertiseHost is the address derived from the listen address or the
	// host's interfaces when no URL or tunnel is set; advertiseErr says why
	// there is none.
	advertiseHost string
	advertiseErr  error
	// keyOnCommandLine: --key was used, which other users see in ps.
	keyOnCommandLine bool
}

// defaultEngineURLs are where each engine listens out of the box; a plain
// OpenAI-compatible server has no such default.
func defaultEngineURL(kind string) string {
	switch kind {
	case engine.KindOllama:
		return "http://127.0.0.1:11434"
	case engine.KindVLLM, engine.KindSGLang:
		return "http://127.0.0.1:8000"
	case engine.KindTGI, engine.KindLlamaCpp:
		return "http://127.0.0.1:8080"
	}
	return ""
}

// setting is one flag with its environment variable. Defaults come from the
// variable only after parsing, so that -h never prints a key taken from the
// environment.
type setting struct {
	flag, env, def, usage string
}

func settings() []setting {
	return []setting{
		{"gateway", "SWITCHYARD_GATEWAY", "", "the gateway's gRPC address, host:port"},
		{"node-id", "SWITCHYARD_NODE_ID", "", "this node's id, as its key was minted for"},
		{"key", "SWITCHYARD_NODE_KEY", "", "the node key (syn_…); prefer the variable or --key-file: command lines show in process lists"},
		{"key-file", "SWITCHYARD_NODE_KEY_FILE", "", "a file holding the node key"},
		{"engine", "SWITCHYARD_ENGINE", engine.KindOllama, "the engine: " + strings.Join(engine.Kinds(), "|")},
		{"engine-url", "SWITCHYARD_ENGINE_URL", "", "the engine's URL (default: ollama http://127.0.0.1:11434, vllm/sglang http://127.0.0.1:8000, tgi/llamacpp http://127.0.0.1:8080)"},
		{"engine-api-key", "SWITCHYARD_ENGINE_API_KEY", "", "the API key the engine was started with, if any; prefer the variable"},
		{"listen", "SWITCHYARD_FRONT_ADDR", ":8081", "the engine front's listen address"},
		{"advertise-url", "SWITCHYARD_ADVERTISE_URL", "", "the front's base URL as the gateway reaches it (default: http://<first private IP>:<port>)"},
		{"slots", "SWITCHYARD_SLOTS", "0", "requests run at once per model; 0 asks the engine, else 4"},
		{"models", "SWITCHYARD_MODELS", "", "models to offer, comma-separated; empty offers all the engine has"},
		{"tls", "SWITCHYARD_GATEWAY_TLS", "false", "use TLS to the gateway"},
		{"shutdown-timeout", "SWITCHYARD_SHUTDOWN_TIMEOUT", "30s", "how long in-flight requests get on SIGTERM"},
		{"expose", "SWITCHYARD_EXPOSE", "", "cloudflared: reach the front through a Cloudflare quick tunnel"},
		{"log-format", "SWITCHYARD_LOG_FORMAT", "json", "json|text"},
		{"log-level", "SWITCHYARD_LOG_LEVEL", "info", "debug|info|warn|error"},
	}
}

// errUsage is a problem already reported on stderr; the exit code is 2.
var errUsage = errors.New("usage")

// parseConfig reads the flags in args over the environment. Flag syntax
// errors are printed by the flag package and return errUsage; problems with
// values come back joined, each naming its flag and variable.
func parseConfig(name string, args []string, stderr io.Writer, getenv func(string) string) (config, error) {
	fset := flag.NewFlagSet("switchyard-agent "+name, flag.ContinueOnError)
	fset.SetOutput(stderr)
	raw := map[string]*string{}
	for _, s := range settings() {
		if s.flag == "tls" {
			continue
		}
		usage := s.usage + " (" + s.env + ")"
		if s.def != "" {
			usage += " (default " + s.def + ")"
		}
		raw[s.flag] = fset.String(s.flag, "", usage)
	}
	tlsFlag := fset.Bool("tls", false, "use TLS to the gateway (SWITCHYARD_GATEWAY_TLS)")
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return config{}, err
		}
		return config{}, errUsage
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "switchyard-agent %s: unexpected arguments: %s\n", name, strings.Join(fset.Args(), " "))
		return config{}, errUsage
	}
	set := map[string]bool{}
	fset.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// value is the flag when given, else the variable, else the default.
	value := func(s setting) string {
		if set[s.flag] {
			return strings.TrimSpace(*raw[s.flag])
		}
		if v := strings.TrimSpace(getenv(s.env)); v != "" {
			return v
		}
		return s.def
	}
	v := map[string]string{}
	for _, s := range settings() {
		if s.flag != "tls" {
			v[s.flag] = value(s)
		}
	}
	var errs []error
	bad := func(flagName, format string, a ...any) {
		env := ""
		for _, s := range settings() {
			if s.flag == flagName {
				env = s.env
			}
		}
		errs = append(errs, fmt.Errorf("--%s (%s): "+format, append([]any{flagName, env}, a...)...))
	}

	c := config{
		Gateway: v["gateway"], NodeID: v["node-id"], EngineAPIKey: v["engine-api-key"],
		Listen: v["listen"], AdvertiseURL: v["advertise-url"], Expose: v["expose"],
		LogFormat: v["log-format"], keyOnCommandLine: set["key"],
	}

	switch {
	case c.Gateway == "":
		bad("gateway", "is required: the gateway's gRPC address, such as gw.example.com:9090")
	case strings.Contains(c.Gateway, "://"):
		bad("gateway", "wants host:port without a scheme, such as gw.example.com:9090 (use --tls for TLS), got %q", c.Gateway)
	default:
		if err := checkHostPort(c.Gateway, false); err != nil {
			bad("gateway", "%v", err)
		}
	}
	switch {
	case c.NodeID == "":
		bad("node-id", "is required: the node id the key was minted for")
	case strings.IndexFunc(c.NodeID, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		bad("node-id", "must not contain spaces or control characters, got %q", c.NodeID)
	}
	c.Key = readKey(v["key"], v["key-file"], set["key"], set["key-file"], bad)

	c.Engine = strings.ToLower(v["engine"])
	if !slices.Contains(engine.Kinds(), c.Engine) {
		bad("engine", "must be one of %s, got %q", strings.Join(engine.Kinds(), ", "), v["engine"])
	}
	c.EngineURL = v["engine-url"]
	if c.EngineURL == "" {
		c.EngineURL = defaultEngineURL(c.Engine)
	}
	if c.EngineURL == "" {
		if c.Engine == engine.KindOpenAI {
			bad("engine-url", "is required with --engine=openai: the server's URL, such as http://127.0.0.1:8000")
		}
	} else if err := checkHTTPURL(c.EngineURL); err != nil {
		bad("engine-url", "%v", err)
	}
	if err := checkHostPort(c.Listen, true); err != nil {
		bad("listen", "%v", err)
	}
	if c.AdvertiseURL != "" {
		if err := checkHTTPURL(c.AdvertiseURL); err != nil {
			bad("advertise-url", "%v", err)
		}
		c.AdvertiseURL = strings.TrimSuffix(c.AdvertiseURL, "/")
	}
	switch c.Expose {
	case "":
	case "cloudflared":
		if c.AdvertiseURL != "" {
			bad("expose", "and --advertise-url both say where the gateway reaches the front: set one")
		}
	default:
		bad("expose", "the only choice is cloudflared, got %q", c.Expose)
	}
	if n, err := strconv.Atoi(v["slots"]); err != nil || n < 0 {
		bad("slots", "must be a whole number ≥ 0 (0 asks the engine), got %q", v["slots"])
	} else {
		c.Slots = n
	}
	for _, m := range strings.Split(v["models"], ",") {
		if m = strings.TrimSpace(m); m != "" && !slices.Contains(c.Models, m) {
			c.Models = append(c.Models, m)
		}
	}
	switch {
	case set["tls"]:
		c.TLS = *tlsFlag
	case getenv("SWITCHYARD_GATEWAY_TLS") != "":
		b, err := strconv.ParseBool(strings.TrimSpace(getenv("SWITCHYARD_GATEWAY_TLS")))
		if err != nil {
			bad("tls", "must be true or false, got %q", getenv("SWITCHYARD_GATEWAY_TLS"))
		}
		c.TLS = b
	}
	if d, err := time.ParseDuration(v["shutdown-timeout"]); err != nil || d <= 0 {
		bad("shutdown-timeout", "must be a positive duration such as 30s, got %q", v["shutdown-timeout"])
	} else {
		c.ShutdownTimeout = d
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		bad("log-format", "must be json or text, got %q", c.LogFormat)
	}
	if err := c.LogLevel.UnmarshalText([]byte(v["log-level"])); err != nil {
		bad("log-level", "must be debug, info, warn or error, got %q", v["log-level"])
	}
	if c.AdvertiseURL == "" && c.Expose == "" {
		c.advertiseHost, c.advertiseErr = advertiseHost(c.Listen, interfaceAddrs)
	}
	return c, errors.Join(errs...)
}

// readKey takes the key from --key or --key-file; a flag beats the other
// one's variable. Messages about it never contain the key, nor any part of
// the file.
func readKey(key, file string, keyFlag, fileFlag bool, bad func(string, string, ...any)) string {
	if key != "" && file != "" {
		switch {
		case keyFlag && !fileFlag:
			file = ""
		case fileFlag && !keyFlag:
			key = ""
		default:
			bad("key", "and --key-file (SWITCHYARD_NODE_KEY_FILE) are both set: give the key one way")
			return ""
		}
	}
	switch {
	case key == "" && file == "":
		bad("key", "is required: the node key minted for this node (MintNodeKey); --key-file or SWITCHYARD_NODE_KEY keep it out of process lists")
		return ""
	case key == "":
		data, err := os.ReadFile(file)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			bad("key-file", "cannot read %s: %v", file, err)
			return ""
		}
		key = strings.TrimSpace(string(data))
		if key == "" {
			bad("key-file", "%s is empty: it should hold the node key (syn_…)", file)
			return ""
		}
		if !validKeyShape(key) {
			bad("key-file", "%s does not hold a node key: node keys begin with syn_ and are one line", file)
			return ""
		}
		return key
	}
	if !validKeyShape(key) {
		bad("key", "is not a node key: node keys begin with syn_ (mint one with MintNodeKey)")
		return ""
	}
	return key
}

func validKeyShape(k string) bool {
	return strings.HasPrefix(k, "syn_") && len(k) > len("syn_") &&
		strings.IndexFunc(k, func(r rune) bool { return r <= ' ' || r > '~' }) < 0
}

func checkHostPort(a string, allowEmptyHost bool) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("%q is not host:port", a)
	}
	if host == "" && !allowEmptyHost {
		return fmt.Errorf("%q has no host", a)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 || (p == 0 && !allowEmptyHost) {
		return fmt.Errorf("%q has no valid port", a)
	}
	return nil
}

func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", raw)
	case u.Host == "":
		return fmt.Errorf("%q has no host", raw)
	case u.User != nil:
		return fmt.Errorf("the URL must not carry a user or password")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%q: a base URL has no query or fragment", raw)
	}
	return nil
}

// interfaceAddrs lists the addresses of the host's interfaces that are up,
// by interface name.
func interfaceAddrs() ([]ifaceAddr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var out []ifaceAddr
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				out = append(out, ifaceAddr{name: ifc.Name, addr: p.Addr()})
			}
		}
	}
	return out, nil
}

type ifaceAddr struct {
	name string
	addr netip.Addr
}

// advertiseHost is the host the gateway is told to reach the front at when
// the operator said nothing: the listen address's own host when it names
// one, else the host's first private address.
func advertiseHost(listen string, list func() ([]ifaceAddr, error)) (string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", err
	}
	if ip, err := netip.ParseAddr(host); host != "" && (err != nil || !ip.IsUnspecified()) {
		return host, nil
	}
	addrs, err := list()
	if err != nil {
		return "", fmt.Errorf("listing network interfaces: %w", err)
	}
	if a, ok := pickPrivate(addrs); ok {
		return a.String(), nil
	}
	return "", errors.New("this host has no private IP address (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) the gateway could reach it at: set --advertise-url (SWITCHYARD_ADVERTISE_URL) or use --expose=cloudflared")
}

// pickPrivate prefers a private IPv4 address on a physical-looking interface;
// container bridges are passed over, since a gateway on another host cannot
// reach them. The shared-address range 100.64/10 (carrier NAT, Tailscale)
// comes after the RFC 1918 ranges, IPv6 unique-local last.
func pickPrivate(addrs []ifaceAddr) (netip.Addr, bool) {
	cgnat := netip.MustParsePrefix("100.64.0.0/10")
	virtual := func(name string) bool {
		for _, p := range []string{"docker", "br-", "veth", "virbr", "cni", "flannel", "cali", "vmnet", "podman"} {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	ranks := []func(netip.Addr) bool{
		func(a netip.Addr) bool { return a.Is4() && a.IsPrivate() },
		func(a netip.Addr) bool { return a.Is4() && cgnat.Contains(a) },
		func(a netip.Addr) bool { return a.Is6() && a.IsPrivate() },
	}
	for _, skipVirtual := range []bool{true, false} {
		for _, rank := range ranks {
			for _, a := range addrs {
				if (!skipVirtual || !virtual(a.name)) && rank(a.addr.Unmap()) {
					return a.addr.Unmap(), true
				}
			}
		}
	}
	return netip.Addr{}, false
}

// advertised is the front's base URL as the heartbeat carries it, for a
// front bound to port.
func (c config) advertised(port int) (string, error) {
	if c.AdvertiseURL != "" {
		return c.AdvertiseURL, nil
	}
	if c.advertiseErr != nil {
		return "", c.advertiseErr
	}
	return "http://" + net.JoinHostPort(c.advertiseHost, strconv.Itoa(port)), nil
}
